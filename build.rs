//! Writes the script catalogue (`src/scripts/catalogue.rs` includes it) from the files under
//! `lua/`: one constant per file, named after its path (`lua/fair/acquire.lua` is
//! `FAIR_ACQUIRE`), whose source is the files its `-- Needs: a/b, c/d` header line names, in that
//! order, then the file itself (a script's, not a fragment's, inside the wrapper that
//! `catalogue!` puts around it). A script carries of each fragment only the top-level functions
//! it reaches (`prune`, written to `OUT_DIR/scripts/`): every `EVALSHA` runs a script's text
//! from its top, which makes each of its functions again, so one it never calls costs every
//! call. A new script, or a new type's
//! folder of them, is picked up without any Rust to edit.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("lua");
    println!("cargo:rerun-if-changed=lua");
    let mut files = BTreeMap::new();
    collect(&root, &root, &mut files);

    let mut needed = std::collections::BTreeSet::new();
    let mut entries = Vec::new();
    for (path, text) in &files {
        let needs = needs(text);
        for need in &needs {
            assert!(
                files.contains_key(need),
                "lua/{path}.lua needs lua/{need}.lua, which is not there"
            );
            needed.insert(need.clone());
        }
        entries.push((path, needs, summary(text)));
    }

    let pruned = Path::new(&std::env::var("OUT_DIR").unwrap()).join("scripts");
    std::fs::create_dir_all(&pruned).unwrap();
    let mut out = String::from("catalogue! {\n");
    for (path, needs, summary) in &entries {
        let mut doc = format!("{summary}\n\nThe text of `lua/{path}.lua`");
        if !needs.is_empty() {
            let after: Vec<String> = needs.iter().map(|n| format!("`lua/{n}.lua`")).collect();
            let pruned = if needed.contains(*path) {
                ""
            } else {
                " (of each, the functions this script reaches)"
            };
            write!(doc, " after {}{pruned}", after.join(", ")).unwrap();
        }
        doc.push('.');
        if needed.contains(*path) {
            doc.push_str(" A fragment: other scripts start with it.");
        }
        let parts: Vec<String> = needs
            .iter()
            .chain([*path])
            .map(|p| format!("{p:?}"))
            .collect();
        writeln!(out, "    #[doc = {doc:?}]").unwrap();
        let name = const_name(path);
        if needed.contains(*path) {
            writeln!(out, "    {name} = fragment [{}];", parts.join(", ")).unwrap();
        } else {
            // A script: its fragments, pruned of the functions it never reaches, then itself.
            let texts: Vec<&str> = needs.iter().map(|n| files[n.as_str()].as_str()).collect();
            let source = prune(&texts, &files[path.as_str()]);
            std::fs::write(pruned.join(format!("{name}.lua")), source).unwrap();
            writeln!(out, "    {name} = script [{name:?}];").unwrap();
        }
    }
    out.push_str("}\n\n");
    out.push_str("/// Every script above (not the fragments other scripts start with), as (its\n");
    out.push_str("/// constant's name, its source), by path.\n");
    out.push_str("// Read by the tests only.\n");
    out.push_str("#[cfg_attr(not(any(test, feature = \"testing\")), allow(dead_code))]\n");
    out.push_str("pub const ALL: &[(&str, &str)] = &[\n");
    for (path, _, _) in entries
        .iter()
        .filter(|(path, _, _)| !needed.contains(*path))
    {
        let name = const_name(path);
        writeln!(out, "    ({name:?}, {name}),").unwrap();
    }
    out.push_str("];\n");
    let scripts: Vec<&String> = entries
        .iter()
        .map(|(path, _, _)| *path)
        .filter(|path| !needed.contains(*path))
        .collect();
    let library = library(&files, &needed, &scripts);
    let dest = Path::new(&std::env::var("OUT_DIR").unwrap()).join("library.lua");
    std::fs::write(dest, library).unwrap();
    out.push_str("\n/// The scripts flagged `no-writes` (their header's `-- Flags:` line), by constant name:\n");
    out.push_str("/// called by `FCALL_RO`.\n");
    out.push_str("pub(crate) const READ_ONLY: &[&str] = &[\n");
    for path in &scripts {
        if flags(&files[path.as_str()]).contains(&"no-writes".to_owned()) {
            writeln!(out, "    {:?},", const_name(path)).unwrap();
        }
    }
    out.push_str("];\n");
    let dest = Path::new(&std::env::var("OUT_DIR").unwrap()).join("catalogue.rs");
    std::fs::write(dest, out).unwrap();
}

/// Every `.lua` file under `dir`, by its path from `root` without `.lua`, with its text.
fn collect(root: &Path, dir: &Path, files: &mut BTreeMap<String, String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            collect(root, &path, files);
        } else if path.extension().is_some_and(|e| e == "lua") {
            let name = path.strip_prefix(root).unwrap().with_extension("");
            let name = name.to_str().unwrap().replace('\\', "/");
            files.insert(name, std::fs::read_to_string(&path).unwrap());
        }
    }
}

/// The parts named by the file's `-- Needs:` line, in order.
fn needs(text: &str) -> Vec<String> {
    let header = text.lines().take_while(|line| line.starts_with("--"));
    header
        .filter_map(|line| line.strip_prefix("-- Needs:"))
        .flat_map(|list| list.split(','))
        .map(|part| part.trim().to_owned())
        .filter(|part| !part.is_empty())
        .collect()
}

/// A script's source: `fragments` in order, each without the top-level `local function`s that
/// `script` never reaches (called, or named, from its own text or from a function it reaches),
/// then `script`. Every other line of a fragment is kept. A fragment's function is a line
/// `local function <name>(` up to the first line `end` after it (the fragments' layout), with
/// the comment lines right above it.
fn prune(fragments: &[&str], script: &str) -> String {
    let chunks: Vec<Vec<Chunk>> = fragments.iter().map(|text| chunks(text)).collect();
    let mut reached: std::collections::BTreeSet<String> = words(script).collect();
    for chunk in chunks.iter().flatten() {
        if chunk.function.is_none() {
            reached.extend(words(&chunk.text));
        }
    }
    loop {
        let before = reached.len();
        for chunk in chunks.iter().flatten() {
            if chunk.function.as_ref().is_some_and(|f| reached.contains(f)) {
                reached.extend(words(&chunk.text));
            }
        }
        if reached.len() == before {
            break;
        }
    }
    let mut out = String::new();
    for chunk in chunks.iter().flatten() {
        if chunk
            .function
            .as_ref()
            .map_or(true, |f| reached.contains(f))
        {
            out.push_str(&chunk.text);
        }
    }
    out.push_str(script);
    out
}

/// A piece of a fragment: a top-level function with its comment (`function`: its name), or
/// the lines between two of them.
struct Chunk {
    function: Option<String>,
    text: String,
}

/// A fragment's text cut into [`Chunk`]s, which joined give the text back.
fn chunks(text: &str) -> Vec<Chunk> {
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    let mut out = Vec::new();
    let mut rest = String::new();
    let mut i = 0;
    while i < lines.len() {
        let Some(name) = lines[i]
            .strip_prefix("local function ")
            .and_then(|r| r.split('(').next())
        else {
            rest.push_str(lines[i]);
            i += 1;
            continue;
        };
        // The comment right above it goes with it.
        let kept: Vec<&str> = rest.split_inclusive('\n').collect();
        let mut cut = kept.len();
        while cut > 0 && kept[cut - 1].starts_with("--") {
            cut -= 1;
        }
        let comment = kept[cut..].concat();
        let before = kept[..cut].concat();
        if !before.is_empty() {
            out.push(Chunk {
                function: None,
                text: before,
            });
        }
        rest.clear();
        let end = (i..lines.len())
            .find(|&j| lines[j].trim_end() == "end")
            .unwrap_or_else(|| panic!("local function {name} has no `end` line"));
        let mut body = comment;
        body.push_str(&lines[i..=end].concat());
        out.push(Chunk {
            function: Some(name.trim().to_owned()),
            text: body,
        });
        i = end + 1;
    }
    if !rest.is_empty() {
        out.push(Chunk {
            function: None,
            text: rest,
        });
    }
    out
}

/// The identifiers in `text` (its comments included: a name only a comment mentions keeps a
/// function it did not need, which costs nothing but the function).
fn words(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .filter(|w| !w.is_empty())
        .map(str::to_owned)
}

/// The file's first comment paragraph, on one line.
fn summary(text: &str) -> String {
    let words: Vec<&str> = text
        .lines()
        .map_while(|line| line.strip_prefix("--"))
        .map(str::trim)
        .take_while(|line| {
            !line.is_empty()
                && !line.starts_with("Needs:")
                && !line.starts_with("Wraps:")
                && !line.starts_with("Flags:")
        })
        .collect();
    // As Markdown text: no HTML tags or link brackets out of `<name>` or `KEYS[1]`.
    let text = words.join(" ");
    text.replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('[', "\\[")
        .replace(']', "\\]")
}

/// `fair/read_acquire` → `FAIR_READ_ACQUIRE`.
fn const_name(path: &str) -> String {
    path.replace('/', "_").to_uppercase()
}

/// The `-- Flags:` of a script's header (`no-writes`, `allow-oom`), in order.
fn flags(text: &str) -> Vec<String> {
    let header = text.lines().take_while(|line| line.starts_with("--"));
    let flags: Vec<String> = header
        .filter_map(|line| line.strip_prefix("-- Flags:"))
        .flat_map(|list| list.split(','))
        .map(|flag| flag.trim().to_owned())
        .filter(|flag| !flag.is_empty())
        .collect();
    for flag in &flags {
        assert!(
            flag == "no-writes" || flag == "allow-oom",
            "unknown script flag {flag}: relock's scripts use no-writes or allow-oom"
        );
    }
    flags
}

/// Every script as one function library (`FUNCTION LOAD`), but for its first line (the
/// `#!lua name=` shebang, which the client writes with the library's id, as it writes the
/// id in place of each `@ID@`).
///
/// The library's top level declares `KEYS`, `ARGV` and `CALL` (the run's own table of
/// per-call state, which the `EVALSHA` path makes a fresh local per run) and then every
/// fragment that defines functions, whole and once, in an order where each comes after those
/// it calls: built at load, not per call. A fragment without functions (the fence's check) is
/// code that runs per call: it goes into each script that needs it, before the script. Each
/// script is registered as `relock_@ID@_<its constant, lower case>`, its callback setting
/// `KEYS`, `ARGV` and `CALL` for the fragments' functions (one function runs at a time on a
/// server, so the shared upvalues never mix two calls), with its header's flags.
fn library(
    files: &BTreeMap<String, String>,
    fragments: &std::collections::BTreeSet<String>,
    scripts: &[&String],
) -> String {
    let defines = |path: &str| -> Vec<String> {
        chunks(&files[path])
            .into_iter()
            .filter_map(|chunk| chunk.function)
            .collect()
    };
    let shared: Vec<&String> = fragments
        .iter()
        .filter(|path| !defines(path).is_empty())
        .collect();
    // At top level a fragment may define functions and constants, no state: a value kept from
    // one call to the next would be a bug only the library path has.
    for path in &shared {
        for chunk in chunks(&files[path.as_str()]) {
            if chunk.function.is_some() {
                continue;
            }
            for line in chunk.text.lines() {
                let line = line.trim_end();
                if line.is_empty() || line.starts_with("--") {
                    continue;
                }
                let constant = line
                    .strip_prefix("local ")
                    .and_then(|rest| rest.split_once(" = "))
                    .is_some_and(|(name, value)| {
                        name.chars().all(|c| c.is_ascii_uppercase() || c == '_')
                            && (value.parse::<f64>().is_ok()
                                || (value.starts_with('\'') && value.ends_with('\'')))
                    });
                assert!(
                    constant,
                    "lua/{path}.lua: `{line}` at top level is neither a function nor a constant \
                     (keep per-call state in CALL)"
                );
            }
        }
    }
    // Each fragment after those whose functions it calls.
    let mut order: Vec<&String> = Vec::new();
    let mut left = shared.clone();
    while !left.is_empty() {
        let ready = left.iter().position(|path| {
            let text = &files[path.as_str()];
            let used: std::collections::BTreeSet<String> = words(text).collect();
            left.iter()
                .filter(|other| *other != path)
                .all(|other| defines(other).iter().all(|f| !used.contains(f)))
        });
        let at =
            ready.unwrap_or_else(|| panic!("the fragments {left:?} call each other in a circle"));
        order.push(left.remove(at));
    }
    let mut names = std::collections::BTreeMap::new();
    for path in &order {
        for name in defines(path) {
            if let Some(other) = names.insert(name.clone(), path.to_string()) {
                panic!("lua/{path}.lua and lua/{other}.lua both define {name}");
            }
        }
    }

    let mut out = String::from("local KEYS, ARGV, CALL\n");
    for path in &order {
        writeln!(out, "-- lua/{path}.lua").unwrap();
        out.push_str(&files[path.as_str()]);
    }
    for path in scripts {
        let text = &files[path.as_str()];
        let flags: Vec<String> = flags(text).iter().map(|f| format!("'{f}'")).collect();
        let name = const_name(path).to_lowercase();
        writeln!(
            out,
            "redis.register_function{{function_name = 'relock_@ID@_{name}', flags = {{{}}}, \
             callback = function(keys, args)\nKEYS, ARGV, CALL = keys, args, {{}}",
            flags.join(", ")
        )
        .unwrap();
        for need in needs(text) {
            if !shared.contains(&&need) {
                out.push_str(&files[need.as_str()]);
            }
        }
        out.push_str(text);
        out.push_str("end}\n");
    }
    out
}
