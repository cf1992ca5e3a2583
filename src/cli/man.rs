//! `tinyagent man`: one manual page that holds every command (each a
//! section with its synopsis, description and options), so it promises no
//! other page.

use super::CliError;
use super::args::Cli;

/// The whole page, roff.
pub fn page() -> Result<Vec<u8>, CliError> {
    let err = |e: std::io::Error| CliError::new(1, format!("cannot make the man page: {e}"));
    let cmd = <Cli as clap::CommandFactory>::command();
    let man = clap_mangen::Man::new(cmd.clone());
    let mut out = Vec::new();
    man.render_title(&mut out).map_err(err)?;
    man.render_name_section(&mut out).map_err(err)?;
    man.render_synopsis_section(&mut out).map_err(err)?;
    man.render_description_section(&mut out).map_err(err)?;
    man.render_options_section(&mut out).map_err(err)?;
    out.extend_from_slice(
        b".SH COMMANDS\nEach command below is described in full here; \
          \\fBtinyagent help\\fR COMMAND says the same on a terminal.\n",
    );
    for sub in cmd.get_subcommands() {
        command(&mut out, sub, "tinyagent").map_err(err)?;
    }
    man.render_extra_section(&mut out).map_err(err)?;
    man.render_version_section(&mut out).map_err(err)?;
    Ok(out)
}

/// One command's section (and its own commands', nested).
fn command(out: &mut Vec<u8>, sub: &clap::Command, parent: &str) -> std::io::Result<()> {
    if sub.is_hide_set() {
        return Ok(());
    }
    let full = format!("{parent} {}", sub.get_name());
    let named = sub.clone().bin_name(&full).display_name(&full);
    let man = clap_mangen::Man::new(named);
    let mut body = Vec::new();
    man.render_synopsis_section(&mut body)?;
    man.render_description_section(&mut body)?;
    if sub.get_arguments().any(|a| !a.is_hide_set()) {
        man.render_options_section(&mut body)?;
    }
    if sub.get_after_help().is_some() || sub.get_after_long_help().is_some() {
        man.render_extra_section(&mut body)?;
    }
    let body = String::from_utf8_lossy(&body)
        .replace(".SH SYNOPSIS\n", "")
        .replace(".SH DESCRIPTION\n", ".PP\n")
        .replace(".SH OPTIONS\n", ".SS Options\n")
        .replace(".SH EXTRA\n", ".SS Examples\n");
    out.extend_from_slice(format!(".SH \"{}\"\n", full.to_uppercase()).as_bytes());
    out.extend_from_slice(body.as_bytes());
    for nested in sub.get_subcommands() {
        command(out, nested, &full)?;
    }
    Ok(())
}
