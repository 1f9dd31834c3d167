//! `symheap-map SNAPSHOT.json... [-o OUT.html]`: draws pool snapshots (one per rank, as
//! [`Snapshot::to_json`] writes them) as one self-contained HTML page: one SVG per window, one
//! lane per rank, blocks coloured by tag, regions that differ between ranks outlined in red,
//! and each rank's accounting. See [`symheap_tools::heap_map`].
//!
//! ```sh
//! cargo run --release --example inference_worker -- --snapshot /tmp/snap
//! cargo run --release --bin symheap-map -- /tmp/snap/rank-*.json -o /tmp/snap/heap-map.html
//! ```
//!
//! Exit status: 0 on success; 2 for a usage error or an input file that cannot be read or is
//! not a snapshot (the message names the file); 1 if the page cannot be written.

use std::path::PathBuf;
use std::process::ExitCode;

use symheap::Snapshot;
use symheap_tools::heap_map;

const USAGE: &str = "usage: symheap-map SNAPSHOT.json... [-o OUT.html]

Draws symheap pool snapshots (one per rank, from Snapshot::to_json) as one self-contained
HTML page (default OUT: heap-map.html): one SVG per window with a lane per rank, blocks
coloured by tag, regions that differ between ranks outlined in red, and per-rank stats.";

struct Args {
    inputs: Vec<PathBuf>,
    output: PathBuf,
}

fn parse(mut args: impl Iterator<Item = std::ffi::OsString>) -> Result<Args, String> {
    let mut inputs = Vec::new();
    let mut output = None;
    let mut options = true;
    while let Some(arg) = args.next() {
        match arg.to_str() {
            Some("-o" | "--output") if options => {
                let value = args.next().ok_or("-o needs a file name")?;
                output = Some(PathBuf::from(value));
            }
            Some("-h" | "--help") if options => return Err(String::new()),
            Some("--") if options => options = false,
            Some(flag) if options && flag.starts_with('-') && flag != "-" => {
                return Err(format!("unknown option {flag}"));
            }
            _ => inputs.push(PathBuf::from(arg)),
        }
    }
    if inputs.is_empty() {
        return Err("no SNAPSHOT.json given".into());
    }
    Ok(Args {
        inputs,
        output: output.unwrap_or_else(|| PathBuf::from("heap-map.html")),
    })
}

fn load(path: &PathBuf) -> Result<Snapshot, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("{}: cannot read: {e}", path.display()))?;
    Snapshot::from_json(&text).map_err(|e| {
        let why = match e {
            symheap::Error::InvalidArgument(why) => why,
            other => other.to_string(),
        };
        format!("{}: {why}", path.display())
    })
}

fn main() -> ExitCode {
    let args = match parse(std::env::args_os().skip(1)) {
        Ok(args) => args,
        Err(why) => {
            if !why.is_empty() {
                eprintln!("symheap-map: {why}");
            }
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    let mut snapshots = Vec::with_capacity(args.inputs.len());
    for path in &args.inputs {
        match load(path) {
            Ok(s) => snapshots.push(s),
            Err(why) => {
                eprintln!("symheap-map: {why}");
                return ExitCode::from(2);
            }
        }
    }
    let html = heap_map::render(&snapshots);
    if let Err(e) = std::fs::write(&args.output, html) {
        eprintln!("symheap-map: {}: cannot write: {e}", args.output.display());
        return ExitCode::FAILURE;
    }
    let windows = snapshots.iter().map(|s| s.windows.len()).max().unwrap_or(0);
    eprintln!(
        "symheap-map: wrote {} ({} rank{}, {windows} window{})",
        args.output.display(),
        snapshots.len(),
        if snapshots.len() == 1 { "" } else { "s" },
        if windows == 1 { "" } else { "s" },
    );
    ExitCode::SUCCESS
}
