//! Stand-alone driver for `flashlog ssd` (same options), for use before the subcommand is
//! wired into the `flashlog` binary: `cargo run --release -p flashlog-ssd --example ssd -- --help`.

use clap::Parser;

#[derive(Parser)]
#[command(
    name = "ssd",
    about = "Run a synthetic workload against the flash SSD emulator"
)]
struct Cli {
    #[command(flatten)]
    args: flashlog_ssd::SsdArgs,
}

fn main() -> anyhow::Result<()> {
    flashlog_ssd::run(&Cli::parse().args)
}
