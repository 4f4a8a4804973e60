//! `switchyard budgets set`, `list` and `delete` against a router on loopback (budgets in
//! memory): the table shows what was set, what it does at its limit, and loses what was deleted;
//! a bad budget or degrade model fails naming the field; deleting a budget that is not there
//! fails saying so.

use switchyard_cli::{DevPorts, Stack, stack::Serving};
use switchyard_testkit::{Served, Shutdown, closed_port};

fn switchyard(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .args(args)
        .env_remove("ROUTER_URL")
        .output()
        .expect("run switchyard")
}

/// `switchyard budgets <args>`, which must succeed: what it printed.
fn succeeds(args: &[&str]) -> String {
    let output = switchyard(&[&["budgets"][..], args].concat());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "budgets {args:?} fails: {stderr}");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// `switchyard budgets <args>`, which must fail: what it said on stderr.
fn fails(args: &[&str]) -> String {
    let output = switchyard(&[&["budgets"][..], args].concat());
    assert!(!output.status.success(), "budgets {args:?} succeeds");
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn budgets_are_set_and_listed_through_the_router() {
    let down = closed_port();
    let stack = Stack::builder(DevPorts::loopback())
        .without_gateway(down.url())
        .without_edge()
        .start()
        .await
        .expect("the stack starts");
    let Serving { router, .. } = stack.serve_each::<_, Shutdown, _>(Served::spawn);
    let url = router.url();
    let router = ["--router-url", url.as_str()];
    let set = |args: &[&str]| succeeds(&[&["set"][..], &router, args].concat());
    let delete = |args: &[&str]| succeeds(&[&["delete"][..], &router, args].concat());
    let list = || succeeds(&[&["list"][..], &router].concat());

    let shown = set(&["--tenant", "acme", "--limit-usd", "25", "--period", "month", "--soft-usd", "20"]);
    assert!(shown.contains("acme") && shown.contains("25.00") && shown.contains("20.00"), "{shown}");
    set(&["--tenant", "globex", "--key", "k1", "--limit-usd", "3", "--period", "day"]);

    let table = list();
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 3, "a header and two budgets:\n{table}");
    assert!(lines[0].starts_with("TENANT") && lines[0].contains("SPENT USD"), "{table}");
    let acme: Vec<&str> = lines[1].split_whitespace().collect();
    assert_eq!(&acme[..6], ["acme", "-", "25.00", "20.00", "month", "0.0000"], "{table}");
    let globex: Vec<&str> = lines[2].split_whitespace().collect();
    assert_eq!(&globex[..6], ["globex", "k1", "3.00", "-", "day", "0.0000"], "{table}");
    assert_eq!(acme.last(), Some(&"refuse"), "{table}");

    // A budget that degrades at its limit; a degrade model of no configured provider is refused.
    let degrade = ["--tenant", "initech", "--limit-usd", "2", "--period", "day", "--on-limit", "degrade"];
    let shown = set(&degrade);
    assert!(
        shown.lines().nth(1).is_some_and(|row| row.starts_with("initech ") && row.ends_with(" degrade")),
        "{shown}"
    );
    let said = fails(&[&["set"][..], &router, &degrade, &["--degrade-model", "nosuch/model"]].concat());
    assert!(said.contains("degrade_model") && said.contains("nosuch"), "{said}");
    delete(&["--tenant", "initech"]);

    // A user's budget: set, shown with its user, deleted by naming it.
    let user = ["--tenant", "initech", "--user", "ann@initech.example"];
    let shown = set(&[&user[..], &["--limit-usd", "1", "--period", "day"]].concat());
    let row: Vec<&str> = shown.lines().nth(1).unwrap_or_default().split_whitespace().collect();
    assert_eq!(row[row.len() - 2..], ["ann@initech.example", "refuse"], "{shown}");
    assert_eq!(delete(&user).trim(), "deleted budget initech/user:ann@initech.example");

    let globex_k1 = ["--tenant", "globex", "--key", "k1"];
    assert_eq!(delete(&globex_k1).trim(), "deleted budget globex/k1");
    let table = list();
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 2, "a header and acme's budget:\n{table}");
    assert!(lines[1].starts_with("acme "), "{table}");
    let said = fails(&[&["delete"][..], &router, &globex_k1].concat());
    assert!(said.contains("no budget globex/k1"), "deleting a budget that is gone fails saying so: {said}");
    let said = fails(&[&["delete"][..], &router, &["--tenant", "not a tenant"]].concat());
    assert!(said.contains("tenant_id"), "a bad tenant is refused naming it: {said}");

    let said = fails(&[&["set"][..], &router, &["--tenant", "acme", "--limit-usd", "-5", "--period", "day"]].concat());
    assert!(said.contains("limit_usd"), "a negative limit is refused naming it: {said}");
    let said = fails(&[&["set"][..], &router, &["--tenant", "acme", "--limit-usd", "5", "--period", "week"]].concat());
    assert!(said.contains("--period"), "an unknown period is refused naming it: {said}");
}
