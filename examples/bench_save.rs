//! Runs `tinyagent bench save` through the library until the binary wires it:
//! `cargo run --release --example bench_save -- [--json] [--lengths 10,100] ...`.

use clap::Parser;
use tinyagent::cli::args::BenchSaveArgs;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: BenchSaveArgs,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let code = tinyagent::bench::bench_save(
        &cli.args,
        &mut std::io::stdout().lock(),
        &mut std::io::stderr().lock(),
    )?;
    std::process::exit(code);
}
