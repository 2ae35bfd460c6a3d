//! `cargo run --release -p flashlog-bench --example bench -- EXPERIMENT [options]`: the
//! `flashlog bench` command without the CLI crate (for developing the bench).

use clap::Parser;

#[derive(Parser)]
#[command(
    name = "bench",
    about = "flashlog bench: the papers' experiments side by side"
)]
struct Cli {
    #[command(flatten)]
    args: flashlog_bench::BenchArgs,
}

fn main() {
    let cli = Cli::parse();
    if let Err(e) = flashlog_bench::run(&cli.args) {
        eprintln!("bench: error: {e:#}");
        std::process::exit(1);
    }
}
