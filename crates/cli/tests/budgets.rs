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

    let set = switchyard(&[
        "budgets",
        "set",
        "--router-url",
        &url,
        "--tenant",
        "acme",
        "--limit-usd",
        "25",
        "--period",
        "month",
        "--soft-usd",
        "20",
    ]);
    let shown = String::from_utf8_lossy(&set.stdout);
    assert!(set.status.success(), "budgets set fails: {}", String::from_utf8_lossy(&set.stderr));
    assert!(shown.contains("acme") && shown.contains("25.00") && shown.contains("20.00"), "{shown}");
    let set = switchyard(&[
        "budgets",
        "set",
        "--router-url",
        &url,
        "--tenant",
        "globex",
        "--key",
        "k1",
        "--limit-usd",
        "3",
        "--period",
        "day",
    ]);
    assert!(set.status.success(), "budgets set --key fails: {}", String::from_utf8_lossy(&set.stderr));

    let list = switchyard(&["budgets", "list", "--router-url", &url]);
    let table = String::from_utf8_lossy(&list.stdout);
    assert!(list.status.success(), "budgets list fails: {}", String::from_utf8_lossy(&list.stderr));
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 3, "a header and two budgets:\n{table}");
    assert!(lines[0].starts_with("TENANT") && lines[0].contains("SPENT USD"), "{table}");
    let acme: Vec<&str> = lines[1].split_whitespace().collect();
    assert_eq!(&acme[..6], ["acme", "-", "25.00", "20.00", "month", "0.0000"], "{table}");
    let globex: Vec<&str> = lines[2].split_whitespace().collect();
    assert_eq!(&globex[..6], ["globex", "k1", "3.00", "-", "day", "0.0000"], "{table}");
    assert_eq!(acme.last(), Some(&"refuse"), "{table}");

    // A budget that degrades at its limit; a degrade model of no configured provider is refused.
    let degrade = [
        "budgets",
        "set",
        "--router-url",
        &url,
        "--tenant",
        "initech",
        "--limit-usd",
        "2",
        "--period",
        "day",
        "--on-limit",
        "degrade",
    ];
    let set = switchyard(&degrade);
    let shown = String::from_utf8_lossy(&set.stdout);
    assert!(set.status.success(), "budgets set --on-limit degrade fails: {}", String::from_utf8_lossy(&set.stderr));
    assert!(
        shown.lines().nth(1).is_some_and(|row| row.starts_with("initech ") && row.ends_with(" degrade")),
        "{shown}"
    );
    let bad = switchyard(&[&degrade[..], &["--degrade-model", "nosuch/model"]].concat());
    assert!(!bad.status.success(), "a degrade model of no configured provider is refused");
    let said = String::from_utf8_lossy(&bad.stderr);
    assert!(said.contains("degrade_model") && said.contains("nosuch"), "{said}");
    let delete = switchyard(&["budgets", "delete", "--router-url", &url, "--tenant", "initech"]);
    assert!(delete.status.success(), "{}", String::from_utf8_lossy(&delete.stderr));

    // A user's budget: set, shown with its user, deleted by naming it.
    let user = ["--router-url", &url, "--tenant", "initech", "--user", "ann@initech.example"];
    let set = switchyard(&[&["budgets", "set"][..], &user, &["--limit-usd", "1", "--period", "day"]].concat());
    let shown = String::from_utf8_lossy(&set.stdout);
    assert!(set.status.success(), "budgets set --user fails: {}", String::from_utf8_lossy(&set.stderr));
    let row: Vec<&str> = shown.lines().nth(1).unwrap_or_default().split_whitespace().collect();
    assert_eq!(row[row.len() - 2..], ["ann@initech.example", "refuse"], "{shown}");
    let delete = switchyard(&[&["budgets", "delete"][..], &user].concat());
    let said = String::from_utf8_lossy(&delete.stdout);
    assert!(delete.status.success(), "budgets delete --user fails: {}", String::from_utf8_lossy(&delete.stderr));
    assert_eq!(said.trim(), "deleted budget initech/user:ann@initech.example");

    let delete = switchyard(&["budgets", "delete", "--router-url", &url, "--tenant", "globex", "--key", "k1"]);
    let said = String::from_utf8_lossy(&delete.stdout);
    assert!(delete.status.success(), "budgets delete fails: {}", String::from_utf8_lossy(&delete.stderr));
    assert_eq!(said.trim(), "deleted budget globex/k1");
    let list = switchyard(&["budgets", "list", "--router-url", &url]);
    let table = String::from_utf8_lossy(&list.stdout);
    assert!(list.status.success(), "budgets list fails: {}", String::from_utf8_lossy(&list.stderr));
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 2, "a header and acme's budget:\n{table}");
    assert!(lines[1].starts_with("acme "), "{table}");
    let again = switchyard(&["budgets", "delete", "--router-url", &url, "--tenant", "globex", "--key", "k1"]);
    assert!(!again.status.success(), "deleting a budget that is gone fails");
    let said = String::from_utf8_lossy(&again.stderr);
    assert!(said.contains("no budget globex/k1"), "{said}");
    let bad = switchyard(&["budgets", "delete", "--router-url", &url, "--tenant", "not a tenant"]);
    assert!(!bad.status.success(), "a bad tenant is refused");
    let said = String::from_utf8_lossy(&bad.stderr);
    assert!(said.contains("tenant_id"), "{said}");

    let bad = switchyard(&[
        "budgets",
        "set",
        "--router-url",
        &url,
        "--tenant",
        "acme",
        "--limit-usd",
        "-5",
        "--period",
        "day",
    ]);
    let said = String::from_utf8_lossy(&bad.stderr);
    assert!(!bad.status.success(), "a negative limit is refused");
    assert!(said.contains("limit_usd"), "{said}");
    let bad = switchyard(&[
        "budgets",
        "set",
        "--router-url",
        &url,
        "--tenant",
        "acme",
        "--limit-usd",
        "5",
        "--period",
        "week",
    ]);
    assert!(!bad.status.success(), "an unknown period is refused");
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--period"), "{}", String::from_utf8_lossy(&bad.stderr));
}
