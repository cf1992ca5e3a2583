//! The command line: clap arguments -> validated options -> commands.

pub mod args;
pub mod inspect;
