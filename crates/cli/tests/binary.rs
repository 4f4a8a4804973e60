//! The `switchyard` binary's flags parse: every service's settings flattened into `dev` without
//! a clash (clap refuses two arguments of one name only when the command is built, at run time).

#[test]
fn dev_help_lists_every_services_settings() {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_switchyard")).args(["dev", "--help"]).output();
    let output = output.expect("run switchyard dev --help");
    let help = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "dev --help fails: {}", String::from_utf8_lossy(&output.stderr));
    for flag in ["--router-port", "--mcp-server", "--openai-base-url", "UNIFIED_CHAT_DEFAULT_MODEL"] {
        assert!(help.contains(flag), "dev --help does not mention {flag}:\n{help}");
    }
}
