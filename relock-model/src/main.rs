//! `relock-model`: `check` runs the bounded model checks; `mirror` serves the conformance mirror.

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("mirror") => relock_model::mirror::main(&args[1..]),
        _ => {
            eprintln!("usage: relock-model check | mirror --real <port>");
            std::process::exit(2);
        }
    }
}
