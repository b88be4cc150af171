//! `relock functions`, `relock functions remove-old` and `relock info`: relock's function
//! libraries on a server (this build's marked current, other builds' removable, other libraries
//! never touched), on one server and per primary of a cluster; and servers without functions
//! (Redis 6.x) or that refuse them (an ACL, the command renamed away), where the client sends
//! its scripts by EVALSHA.

use super::*;

/// A library as another relock build would have loaded it.
const OTHER_BUILD: &str = "relock_0123456789abcdef";

/// `FUNCTION LOAD` of a library `name` with one function `function`, which must succeed.
fn load(server: &RedisServer, name: &str, function: &str) {
    let text = format!(
        "#!lua name={name}\nredis.register_function('{function}', function() return 1 end)"
    );
    let reply = server.cmd(&["FUNCTION", "LOAD", &text]);
    assert!(!reply.starts_with('-'), "FUNCTION LOAD {name}: {reply}");
}

/// The names of the libraries on `server`, from a raw `FUNCTION LIST` (not through relock): in
/// its RESP reply, each name's line comes two after `library_name` (its length's between).
fn loaded(server: &RedisServer) -> Vec<String> {
    let reply = server.cmd(&["FUNCTION", "LIST"]);
    let lines: Vec<&str> = reply.lines().collect();
    lines
        .windows(3)
        .filter(|w| w[0] == "library_name")
        .map(|w| w[2].to_owned())
        .collect()
}

/// Whether the servers the tests run have functions (Redis 7.0 and later, any Valkey).
fn has_functions() -> bool {
    relock::testing::server_version().map_or(true, |found| found.at_least(7, 0))
}

/// On a server without functions (Redis 6.x): `functions` says so and lists nothing, `info`
/// says EVALSHA and why, and `remove-old` removes nothing; all exit 0.
async fn no_functions(url: &str) {
    let out = relock(url, &["functions"]).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        stdout(&out).contains("has no functions"),
        "{}",
        stdout(&out)
    );
    assert_eq!(json(url, &["functions"]).await, json!([]));
    let info = json(url, &["info"]).await;
    assert_eq!(info["scripts"], "evalsha", "{info}");
    assert_eq!(info["evalsha_reason"], "no_functions", "{info}");
    assert_eq!(info["servers"][0]["functions"], "none", "{info}");
    let out = relock(url, &["functions", "remove-old", "--yes"]).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        stdout(&out).contains("no relock library of another build"),
        "{}",
        stdout(&out)
    );
}

/// (a) Once a client connected, `functions` lists this build's library, marked current.
#[tokio::test]
async fn functions_lists_this_builds_library_as_current() {
    let server = RedisServer::start();
    let url = server.url();
    if !has_functions() {
        return no_functions(&url).await;
    }
    let current = relock::library_name();
    assert!(!loaded(&server).iter().any(|l| l == current));
    // Any command connects a client, which loads the library.
    let out = relock(&url, &["info"]).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        loaded(&server).iter().any(|l| l == current),
        "loaded at connect"
    );

    let out = relock(&url, &["functions"]).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 1, "{text}");
    assert!(
        lines[0].starts_with(current) && lines[0].ends_with("  current"),
        "{text}"
    );
    assert!(lines[0].contains(" functions "), "{text}");

    let listed = json(&url, &["functions"]).await;
    let node = format!("127.0.0.1:{}", server.port());
    assert_eq!(listed.as_array().unwrap().len(), 1, "{listed}");
    assert_eq!(listed[0]["name"], current, "{listed}");
    assert_eq!(listed[0]["current"], true, "{listed}");
    assert_eq!(listed[0]["node"], node.as_str(), "{listed}");
    assert!(listed[0]["functions"].as_u64().unwrap() > 1, "{listed}");
}

/// (b) Another build's library is listed as such, a library that is not relock's is not (nor one
/// whose name only starts like relock's); `remove-old` removes nothing without `--yes` and only
/// the other build's library with it.
#[tokio::test]
async fn remove_old_removes_other_builds_libraries_only() {
    let server = RedisServer::start();
    let url = server.url();
    if !has_functions() {
        return no_functions(&url).await;
    }
    let current = relock::library_name();
    load(&server, OTHER_BUILD, &format!("{OTHER_BUILD}_x"));
    load(&server, "mylib", "mylib_x");
    load(&server, "relock_extra", "relock_extra_x");

    let out = relock(&url, &["functions"]).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert!(
        lines[0].starts_with(current) && lines[0].ends_with("  current"),
        "this build's first: {text}"
    );
    assert!(
        lines[1].starts_with(OTHER_BUILD)
            && lines[1].contains(" 1 function ")
            && lines[1].ends_with("  other build"),
        "{text}"
    );
    assert!(
        !text.contains("mylib") && !text.contains("relock_extra"),
        "{text}"
    );
    let listed = json(&url, &["functions"]).await;
    let names: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, [current, OTHER_BUILD], "{listed}");
    assert_eq!(listed[1]["current"], false, "{listed}");
    assert_eq!(listed[1]["functions"], 1, "{listed}");

    // Without --yes (and no terminal to ask on): what it would remove, and nothing removed.
    let out = relock(&url, &["functions", "remove-old"]).await;
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(
        stdout(&out).contains(&format!("would remove {OTHER_BUILD}")),
        "{}",
        stdout(&out)
    );
    assert!(!stdout(&out).contains(current), "{}", stdout(&out));
    assert!(stderr(&out).contains("--yes"), "{}", stderr(&out));
    let out = relock(&url, &["--json", "functions", "remove-old"]).await;
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    let would: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(would["removed"], json!([]), "{would}");
    assert_eq!(would["would_remove"][0]["name"], OTHER_BUILD, "{would}");
    assert_eq!(would["would_remove"].as_array().unwrap().len(), 1);
    let mut all = loaded(&server);
    all.sort();
    let mut expected = vec![current, "mylib", OTHER_BUILD, "relock_extra"];
    expected.sort();
    assert_eq!(all, expected, "nothing was removed");

    let out = relock(&url, &["functions", "remove-old", "--yes"]).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let text = stdout(&out);
    assert_eq!(text.lines().count(), 1, "{text}");
    assert!(
        text.starts_with(&format!("removed {OTHER_BUILD} ")),
        "{text}"
    );
    let mut all = loaded(&server);
    all.sort();
    let mut expected = vec![current, "mylib", "relock_extra"];
    expected.sort();
    assert_eq!(all, expected, "only the other build's library went");

    // Nothing left to remove; the JSON form says what it removed.
    let out = relock(&url, &["functions", "remove-old", "--yes"]).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        stdout(&out).contains("no relock library of another build"),
        "{}",
        stdout(&out)
    );
    load(&server, OTHER_BUILD, &format!("{OTHER_BUILD}_x"));
    let removed = json(&url, &["functions", "remove-old", "--yes"]).await;
    assert_eq!(removed["removed"].as_array().unwrap().len(), 1, "{removed}");
    assert_eq!(removed["removed"][0]["name"], OTHER_BUILD, "{removed}");
    assert_eq!(removed["would_remove"], json!([]), "{removed}");
    assert!(!loaded(&server).iter().any(|l| l == OTHER_BUILD));
}

/// (c) `info` names the server and its version, says the scripts go as functions of this
/// build's library, and counts the relock libraries.
#[tokio::test]
async fn info_says_functions_and_names_this_builds_library() {
    let server = RedisServer::start();
    let url = server.url();
    if !has_functions() {
        return no_functions(&url).await;
    }
    let current = relock::library_name();
    load(&server, OTHER_BUILD, &format!("{OTHER_BUILD}_x"));
    let out = relock(&url, &["info"]).await;
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let text = stdout(&out);
    let row = |label: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(label).map(str::trim))
            .unwrap_or_else(|| panic!("no {label} row: {text}"))
            .to_owned()
    };
    assert_eq!(row("server"), format!("127.0.0.1:{}", server.port()));
    let version = row("version");
    assert!(
        version.starts_with("Redis ") || version.starts_with("Valkey "),
        "{text}"
    );
    assert_eq!(row("scripts"), format!("functions (library {current})"));
    let libraries = row("libraries");
    assert!(
        libraries.starts_with("2 relock libraries") && libraries.contains("1 of another build"),
        "{text}"
    );

    let info = json(&url, &["info"]).await;
    assert_eq!(info["scripts"], "functions", "{info}");
    assert_eq!(info["library"], current, "{info}");
    assert_eq!(info["evalsha_reason"], Value::Null, "{info}");
    let server_json = &info["servers"][0];
    assert_eq!(
        server_json["node"],
        format!("127.0.0.1:{}", server.port()).as_str()
    );
    assert!(server_json["redis_version"].is_string(), "{info}");
    assert_eq!(server_json["functions"], "available", "{info}");
    assert_eq!(server_json["relock_libraries"], 2, "{info}");
    assert_eq!(server_json["other_builds"], 1, "{info}");
}

/// (d) A server that refuses functions: an ACL without them (`FUNCTION LOAD` answers `NOPERM`),
/// and `FUNCTION` renamed away. `info` says EVALSHA and why; `functions` says the server does
/// not allow functions, lists nothing and exits 0; `remove-old` has nothing to remove.
#[tokio::test]
async fn a_server_that_refuses_functions_is_said_so() {
    if !has_functions() {
        // Redis 6.x has neither the command to rename nor the ACL category: no functions at all,
        // which the other tests check there.
        return;
    }
    let acl = RedisServer::start_with(&[
        "--user",
        "default",
        "on",
        "nopass",
        "~*",
        "&*",
        "+@all",
        "-function",
    ]);
    let renamed = RedisServer::start_with(&["--rename-command", "FUNCTION", ""]);
    for (server, reasons, why) in [
        (&acl, &["refused"][..], "NOPERM"),
        // relock's client takes an unknown FUNCTION for a server without functions.
        (&renamed, &["no_functions", "refused"][..], "renamed away"),
    ] {
        let url = server.url();
        let info = json(&url, &["info"]).await;
        assert_eq!(info["scripts"], "evalsha", "{info}");
        let reason = info["evalsha_reason"].as_str().unwrap();
        assert!(reasons.contains(&reason), "{info}");
        assert_eq!(info["servers"][0]["functions"], "refused", "{info}");
        assert_eq!(
            info["servers"][0]["relock_libraries"],
            Value::Null,
            "{info}"
        );
        let text = stdout(&relock(&url, &["info"]).await);
        let scripts = text
            .lines()
            .find_map(|l| l.strip_prefix("scripts"))
            .unwrap_or_else(|| panic!("no scripts row: {text}"))
            .trim();
        assert_eq!(
            scripts,
            format!("EVALSHA: {}", info["evalsha_message"].as_str().unwrap()),
            "{text}"
        );
        if reason == "refused" {
            assert_eq!(
                scripts,
                format!("EVALSHA: {}", relock::Evalsha::Refused),
                "{text}"
            );
        }

        let out = relock(&url, &["functions"]).await;
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        let said = stdout(&out);
        assert!(
            said.contains("the server does not allow functions") && said.contains(why),
            "{said}"
        );
        assert_eq!(json(&url, &["functions"]).await, json!([]));
        let out = relock(&url, &["functions", "remove-old"]).await;
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        assert!(
            stdout(&out).contains("no relock library of another build"),
            "{}",
            stdout(&out)
        );
    }
}

/// On a cluster: each primary's libraries, under its address; `remove-old` removes another
/// build's library from the primary that has it.
#[tokio::test]
async fn functions_on_a_cluster_are_per_primary() {
    if !has_functions() {
        return;
    }
    let cluster = Cluster::start(3);
    let url = cluster.url();
    let current = relock::library_name();
    let node = |port: u16| format!("127.0.0.1:{port}");
    let other = &cluster.nodes()[1];
    load(other, OTHER_BUILD, &format!("{OTHER_BUILD}_x"));

    let listed = json(&url, &["functions"]).await;
    let entries = listed.as_array().unwrap();
    assert_eq!(entries.len(), 4, "{listed}");
    for port in cluster.ports() {
        assert!(
            entries
                .iter()
                .any(|e| e["node"] == node(port).as_str() && e["name"] == current),
            "{port}: {listed}"
        );
    }
    let old: Vec<&Value> = entries.iter().filter(|e| e["current"] == false).collect();
    assert_eq!(old.len(), 1, "{listed}");
    assert_eq!(old[0]["name"], OTHER_BUILD);
    assert_eq!(old[0]["node"], node(other.port()).as_str());
    let text = stdout(&relock(&url, &["functions"]).await);
    for port in cluster.ports() {
        assert!(text.lines().any(|l| l == node(port)), "{text}");
    }
    assert!(
        text.lines()
            .any(|l| l.starts_with(&format!("  {OTHER_BUILD} ")) && l.ends_with("other build")),
        "{text}"
    );
    let info = json(&url, &["info"]).await;
    assert_eq!(info["servers"].as_array().unwrap().len(), 3, "{info}");
    assert_eq!(info["scripts"], "functions", "{info}");

    let removed = json(&url, &["functions", "remove-old", "--yes"]).await;
    assert_eq!(removed["removed"].as_array().unwrap().len(), 1, "{removed}");
    assert_eq!(
        removed["removed"][0]["node"],
        node(other.port()).as_str(),
        "{removed}"
    );
    for server in cluster.nodes() {
        assert_eq!(loaded(server), [current], "{}", server.port());
    }
}
