use clap::Parser;

fn main() {
    let cli = tinyagent::cli::args::Cli::parse();
    std::process::exit(tinyagent::cli::main(cli));
}
