//! Writes the script catalogue (`src/scripts/catalogue.rs` includes it) from the files under
//! `lua/`: one constant per file, named after its path (`lua/fair/acquire.lua` is
//! `FAIR_ACQUIRE`), whose source is the files its `-- Needs: a/b, c/d` header line names, in that
//! order, then the file itself (a script's, not a fragment's, inside the wrapper that
//! `catalogue!` puts around it). A new script, or a new type's folder of them, is picked up
//! without any Rust to edit.

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

    let mut out = String::from("catalogue! {\n");
    for (path, needs, summary) in &entries {
        let mut doc = format!("{summary}\n\nThe text of `lua/{path}.lua`");
        if !needs.is_empty() {
            let after: Vec<String> = needs.iter().map(|n| format!("`lua/{n}.lua`")).collect();
            write!(doc, " after {}", after.join(", ")).unwrap();
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
        let kind = if needed.contains(*path) {
            "fragment"
        } else {
            "script"
        };
        let name = const_name(path);
        writeln!(out, "    {name} = {kind} [{}];", parts.join(", ")).unwrap();
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
