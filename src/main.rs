use clap::Parser;

fn main() {
    let args = tinyagent::cli::args::prepare(std::env::args_os().collect());
    let cli = tinyagent::cli::args::Cli::parse_from(args);
    std::process::exit(tinyagent::cli::main(cli));
}
