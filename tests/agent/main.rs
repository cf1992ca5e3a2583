//! The agent end to end and its parts: the binary against a mock model
//! server (runs, resume, hooks, plan, compaction, trajectories, the
//! sandbox), the `log` commands, the model providers and the tools.
//!
//! One test binary; a group of tests is one module (`cargo test --test agent
//! resume_e2e::` runs one group).

#[path = "../support/mod.rs"]
mod support;

mod agent_e2e;
mod approvals;
mod boundary;
mod chat;
mod checkpoints;
mod cli_surface;
mod compaction_e2e;
mod compaction_resume_e2e;
mod container;
mod hooks_e2e;
mod instructions_e2e;
mod launch_refusals;
mod log_cli_bench;
mod log_cli_inspect;
mod log_cli_inspect_memory;
mod log_cli_live;
mod mcp;
mod model_anthropic;
mod model_anthropic_effort;
mod model_context;
mod model_llama;
mod model_llama_cache;
mod model_llama_resume;
mod model_mock_checks;
mod model_native;
mod model_native_bytes;
mod model_native_journey;
mod model_native_old_log;
mod model_native_stream;
mod model_openai;
mod model_pause;
mod model_refused_connection;
mod model_retry;
mod model_script;
mod model_stops;
mod model_stops_resume;
mod model_usage;
mod plan_e2e;
mod prompt_cache;
mod replication;
mod replication_forged;
mod replication_lease;
mod restore;
mod resume_e2e;
mod sandbox_e2e;
mod secrets;
mod sessions;
mod signals;
mod store_trust;
mod tools_bash;
mod tools_files;
mod tools_registry;
mod tools_sandbox;
mod tools_search;
mod trajectory_e2e;
mod trust;
mod tui;
mod workspace_rule;
