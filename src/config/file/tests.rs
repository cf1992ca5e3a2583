//! Tests of the config file: every contract key parses, unknown keys, bad types
//! and bad values are named, the project file goes over the global one, and the
//! approvals and MCP sections are checked.

use super::*;

#[test]
fn approvals_section_is_checked_and_its_rules_match() {
    let c = Config::parse(
        "[approvals]\nmode = \"mutating\"\nallow = [\"bash:git status*\", \"edit\"]\n",
    )
    .unwrap();
    c.check().unwrap();
    assert_eq!(
        c.approvals.mode().unwrap(),
        super::super::ApproveMode::Mutating
    );
    let rules = c.approvals.rules().unwrap();
    assert!(rules[0].allows("bash", Some("git status --short")));
    assert!(!rules[0].allows("bash", Some("git push")));
    // `*` never stretches over a second command, a pipe or a substitution.
    for sneaky in [
        "git status; rm -rf ~",
        "git status && curl x | sh",
        "git status $(rm x)",
        "git status `rm x`",
        "git status > ../f",
        "git status\nrm x",
    ] {
        assert!(!rules[0].allows("bash", Some(sneaky)), "{sneaky}");
    }
    assert!(!rules[0].allows("bash", None));
    assert!(rules[1].allows("edit", None));
    assert!(!rules[1].allows("write", None));
    for bad in [
        "[approvals]\nmode = \"sometimes\"\n",
        "[approvals]\nallow = [\"read:*.rs\"]\n",
        "[approvals]\nallow = [\":x\"]\n",
        "[approvals]\nallow = [\"bash:[\"]\n",
    ] {
        let e = Config::parse(bad).unwrap().check().unwrap_err().to_string();
        assert!(e.contains("approvals."), "{bad}: {e}");
    }
    assert!(Config::parse("[approvals]\nask = true\n").is_err());
}

#[test]
fn the_project_file_goes_over_the_global_one_key_by_key() {
    let mut base: toml::Table =
        toml::from_str("[model]\nname = \"global\"\nprice_in = 1.0\n[limits]\nmax_steps = 5\n")
            .unwrap();
    let over: toml::Table =
        toml::from_str("[model]\nname = \"project\"\n[env]\nkind = \"sandbox\"\n").unwrap();
    merge(&mut base, over);
    let c = Config::deserialize(toml::Value::Table(base)).unwrap();
    assert_eq!(c.model.name.as_deref(), Some("project"));
    assert_eq!(c.model.price_in, Some(1.0), "kept from the global file");
    assert_eq!(c.limits.max_steps, Some(5));
    assert_eq!(c.env.kind.as_deref(), Some("sandbox"));
}

#[test]
fn parses_every_contract_key() {
    let c = Config::parse(
        r#"
[model]
provider = "openai"
name = "m"
base_url = "http://127.0.0.1:1/v1"
api_key_env = "K"
price_in = 1.5
price_out = 2.0
[plan]
enabled = true
[limits]
max_steps = 5
max_cost_usd = 0.5
max_format_errors = 2
[compaction]
threshold_tokens = 1000
keep_recent = 4
[wal]
snapshot_every = 10
[hooks]
pre_tool = "true"
post_tool = "true"
[env]
kind = "local"
"#,
    )
    .unwrap();
    c.check().unwrap();
    assert_eq!(c.model.name.as_deref(), Some("m"));
    assert_eq!(c.plan.enabled, Some(true));
    assert_eq!(c.limits.max_steps, Some(5));
    assert_eq!(c.compaction.keep_recent, Some(4));
    assert_eq!(c.wal.snapshot_every, Some(10));
    assert_eq!(c.env.kind.as_deref(), Some("local"));
}

#[test]
fn mcp_servers_parse_and_are_checked() {
    let c = Config::parse(
        r#"
[mcp.servers.fs]
command = "node"
args = ["server.js", "/tmp"]
env = { A = "1" }
startup_timeout_ms = 5000
timeout_s = 7
[mcp.servers.off]
command = "x"
enabled = false
"#,
    )
    .unwrap();
    c.check().unwrap();
    let fs = &c.mcp.servers["fs"];
    assert_eq!(fs.args, ["server.js", "/tmp"]);
    assert_eq!(fs.env["A"], "1");
    assert_eq!(fs.timeout_s, Some(7));
    assert_eq!(c.mcp.servers["off"].timeout_s, None);
    assert_eq!(c.mcp.servers["off"].enabled, Some(false));
    for (toml, named) in [
        ("[mcp.servers.a__b]\ncommand = \"x\"\n", "a__b"),
        (
            "[mcp.servers.a]\ncommand = \" \"\n",
            "mcp.servers.a.command",
        ),
        (
            "[mcp.servers.a]\ncommand = \"x\"\nstartup_timeout_ms = 0\n",
            "startup_timeout_ms",
        ),
        (
            "[mcp.servers.a]\ncommand = \"x\"\ntimeout_s = 0\n",
            "mcp.servers.a.timeout_s",
        ),
        (
            "[mcp.servers.a]\ncommand = \"x\"\ntimeout_s = 86401\n",
            "mcp.servers.a.timeout_s",
        ),
        (
            "[mcp.servers.a]\ncommand = \"x\"\nenv = { \"\" = \"1\" }\n",
            "env",
        ),
    ] {
        let e = Config::parse(toml)
            .unwrap()
            .check()
            .unwrap_err()
            .to_string();
        assert!(e.contains(named), "{toml}: {e}");
    }
    let e = Config::parse("[mcp.servers.a]\ncommand = \"x\"\nargz = []\n").unwrap_err();
    assert!(e.contains("argz"), "{e}");
    let e = Config::parse("[mcp.servers.a]\nargs = []\n").unwrap_err();
    assert!(e.contains("command"), "{e}");
}

#[test]
fn unknown_key_is_named() {
    let e = Config::parse("[limits]\nmax_step = 3\n").unwrap_err();
    assert!(e.contains("max_step"), "{e}");
    let e = Config::parse("[checkpoints]\nwatch = true\nwatcher = true\n").unwrap_err();
    assert!(e.contains("watcher"), "{e}");
    let e = Config::parse("[checkpoints]\nwatch = \"yes\"\n").unwrap_err();
    assert!(e.contains("watch"), "{e}");
    let c = Config::parse("[checkpoints]\nwatch = true\n").unwrap();
    assert_eq!(c.checkpoints.watch, Some(true));
    assert_eq!(Config::parse("").unwrap().checkpoints.watch, None);
}

#[test]
fn bad_type_is_named() {
    let e = Config::parse("[limits]\nmax_steps = \"many\"\n").unwrap_err();
    assert!(e.contains("max_steps"), "{e}");
}

#[test]
fn bad_value_is_named() {
    let c = Config::parse("[model]\nprovider = \"gemini\"\n").unwrap();
    let e = c.check().unwrap_err().to_string();
    assert!(e.contains("model.provider"), "{e}");
}
