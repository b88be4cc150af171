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
            !line.is_empty() && !line.starts_with("Needs:") && !line.starts_with("Wraps:")
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
