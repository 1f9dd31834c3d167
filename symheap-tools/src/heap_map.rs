//! The heap map: every rank's [`Snapshot`] drawn as one self-contained HTML page (what the
//! `symheap-map` binary writes).
//!
//! The page needs nothing at view time (no network, no files): the CSS, the SVG and a few
//! lines of JavaScript are inline. It has
//! - a banner saying whether the ranks agree: it lists every rank whose op hash, windows or
//!   regions differ from the reference rank's (the lowest rank given, normally rank 0);
//! - a legend of the tags and their colours;
//! - one SVG per window, with one lane per rank stacked so that the same offset is at the
//!   same x in every lane. Live blocks are bars coloured by tag (`class="block live"`), blocks
//!   waiting to be freed are pale with a dashed outline (`class="block pending"`), free regions
//!   are hatched grey (`class="free"`); a region that is not in every lane (same offset, size,
//!   state and tag) has a red outline (class `diff`). Hovering shows its tag, state, offset,
//!   size, allocation number and rank (an SVG `<title>`), and outlines the regions at the same
//!   offset in the other lanes;
//! - per rank, the pool's accounting (allocated, reserved and the pool budget, peak, largest
//!   free region, fragmentation, collectives on the symmetric and the staged path, HCCL's own
//!   staging buffers, asleep or awake, ...) and its live bytes per tag, beside the tag's
//!   budget if it has one and the bytes a sleep would offload.
//!
//! Widths are not to scale: each stretch between two region boundaries (of any lane) gets a
//! width that grows with the logarithm of its size, so that a 512-byte block next to a
//! 64 MiB free region stays visible and clickable. Offsets and sizes are exact in the tooltips
//! and on the axis.
//!
//! ```
//! use symheap::{AllocDesc, PoolConfig, SymPool, SymVec, emu};
//! use symheap_tools::heap_map;
//!
//! let snapshots = emu::launch(2, |comm| {
//!     let pool = SymPool::new(comm, PoolConfig::new(4 << 20))?;
//!     let _kv = SymVec::<f32>::zeroed_with(&pool, 1024, AllocDesc::tagged("kv-cache"))?;
//!     Ok(pool.snapshot())
//! })?;
//! let html = heap_map::render(&snapshots);
//! assert!(html.contains("kv-cache"));
//! # Ok::<(), symheap::Error>(())
//! ```

use std::collections::{BTreeSet, HashSet};
use std::fmt::Write;

use symheap::heap::binary_units;
use symheap::{Region, RegionState, Snapshot, WindowMap};

/// Tag colours, in the order tags first appear (then repeated).
const PALETTE: [&str; 12] = [
    "#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#b07aa1", "#76b7b2", "#edc948", "#9c755f",
    "#ff9da7", "#1f77b4", "#8cd17d", "#d37295",
];
/// The colour of untagged blocks (tag "").
const UNTAGGED: &str = "#6b7a8f";

/// Drawing sizes, in SVG user units.
const WIDTH: f64 = 1200.0;
const LABEL: f64 = 90.0;
const LANE: f64 = 30.0;
const GAP: f64 = 8.0;
const AXIS: f64 = 26.0;

/// The HTML page that draws `snapshots` (one per rank, in any order; see the
/// [module documentation](self) for what it shows). Lanes are ordered by rank; the lowest
/// rank is the reference that the others are compared with. An empty slice gives a page that
/// says so.
pub fn render(snapshots: &[Snapshot]) -> String {
    let mut ranks: Vec<&Snapshot> = snapshots.iter().collect();
    ranks.sort_by_key(|s| s.rank);
    let tags = Tags::new(&ranks);
    let windows = ranks.iter().map(|s| s.windows.len()).max().unwrap_or(0);
    let mut diverged = vec![Divergence::default(); ranks.len()];
    let mut svgs = String::new();
    for w in 0..windows {
        svgs.push_str(&window_svg(&ranks, w, &tags, &mut diverged));
    }

    let mut page = String::with_capacity(64 * 1024);
    page.push_str("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n");
    page.push_str("<title>symheap heap map</title>\n<style>\n");
    page.push_str(CSS);
    page.push_str("</style>\n</head>\n<body>\n");
    let _ = writeln!(page, "<h1>symheap heap map</h1>");
    page.push_str(DEFS);
    page.push_str(&banner(&ranks, &diverged));
    page.push_str(&legend(&tags));
    page.push_str(&svgs);
    page.push_str(&summary(&ranks, &tags));
    page.push_str("<script>\n");
    page.push_str(SCRIPT);
    page.push_str("</script>\n</body>\n</html>\n");
    page
}

/// The tags of every snapshot, in order of first appearance, each with its colour.
struct Tags(Vec<String>);

impl Tags {
    fn new(ranks: &[&Snapshot]) -> Tags {
        let mut seen = Vec::<String>::new();
        let mut add = |tag: &str| {
            if !seen.iter().any(|t| t == tag) {
                seen.push(tag.to_owned());
            }
        };
        for s in ranks {
            s.stats.tags.iter().for_each(|t| add(&t.tag));
        }
        for s in ranks {
            for w in &s.windows {
                w.regions
                    .iter()
                    .filter_map(|r| r.tag.as_deref())
                    .for_each(&mut add);
            }
        }
        Tags(seen)
    }

    fn colour(&self, tag: &str) -> &'static str {
        if tag.is_empty() {
            return UNTAGGED;
        }
        let named = self.0.iter().filter(|t| !t.is_empty());
        let i = named.take_while(|t| *t != tag).count();
        PALETTE[i % PALETTE.len()]
    }
}

/// A tag as shown: "(untagged)" for "".
fn tag_name(tag: &str) -> &str {
    if tag.is_empty() { "(untagged)" } else { tag }
}

/// How one rank differs from the reference rank.
#[derive(Clone, Default)]
struct Divergence {
    /// (window, regions of this rank's lane that are not in the reference's) per window.
    regions: Vec<(usize, usize)>,
    /// Windows present on one side only or of different sizes.
    windows: Vec<String>,
}

/// What identifies a region across ranks.
type Key<'a> = (u64, u64, u8, Option<&'a str>);

fn key(r: &Region) -> Key<'_> {
    let state = match r.state {
        RegionState::Live => 0,
        RegionState::Pending => 1,
        RegionState::Free => 2,
    };
    (r.offset, r.size, state, r.tag.as_deref())
}

/// The x of every region boundary of any lane: each stretch between two boundaries gets a
/// width that grows with the logarithm of its size.
struct Scale {
    bounds: Vec<u64>,
    xs: Vec<f64>,
}

impl Scale {
    fn new(lanes: &[Option<&WindowMap>]) -> Scale {
        let mut set = BTreeSet::new();
        set.insert(0);
        for w in lanes.iter().flatten() {
            set.insert(w.size);
            for r in &w.regions {
                set.insert(r.offset);
                set.insert(r.offset.saturating_add(r.size));
            }
        }
        let bounds: Vec<u64> = set.into_iter().collect();
        let weights: Vec<f64> = bounds
            .windows(2)
            .map(|b| 1.0 + (1.0 + (b[1] - b[0]) as f64 / 4096.0).log2())
            .collect();
        let total: f64 = weights.iter().sum::<f64>().max(1.0);
        let plot = WIDTH - LABEL - 10.0;
        let mut xs = vec![LABEL];
        let mut at = 0.0;
        for w in weights {
            at += w;
            xs.push(LABEL + plot * at / total);
        }
        Scale { bounds, xs }
    }

    fn x(&self, offset: u64) -> f64 {
        match self.bounds.binary_search(&offset) {
            Ok(i) => self.xs[i],
            // Not a boundary (cannot happen for drawn regions): interpolate.
            Err(0) => self.xs[0],
            Err(i) if i >= self.bounds.len() => self.xs[self.xs.len() - 1],
            Err(i) => {
                let (a, b) = (self.bounds[i - 1], self.bounds[i]);
                let f = (offset - a) as f64 / (b - a) as f64;
                self.xs[i - 1] + f * (self.xs[i] - self.xs[i - 1])
            }
        }
    }
}

/// The SVG of window `w`: a lane per rank, an axis of offsets. Records divergences.
fn window_svg(ranks: &[&Snapshot], w: usize, tags: &Tags, diverged: &mut [Divergence]) -> String {
    let lanes: Vec<Option<&WindowMap>> = ranks.iter().map(|s| s.windows.get(w)).collect();
    let scale = Scale::new(&lanes);
    let sets: Vec<Option<HashSet<Key>>> = lanes
        .iter()
        .map(|l| l.map(|w| w.regions.iter().map(key).collect()))
        .collect();
    let reference = lanes.first().copied().flatten();

    let mut out = String::new();
    let height = AXIS + ranks.len() as f64 * (LANE + GAP) + 4.0;
    let first = ranks.iter().find_map(|s| s.windows.get(w));
    let _ = write!(
        out,
        "<section class=\"window\" id=\"window-{w}\">\n<h2>Window {w}"
    );
    if let Some(win) = first {
        let _ = write!(
            out,
            ": {} <span class=\"dim\">(handle {:#x}, base {:#x})</span>",
            human(win.size),
            win.handle,
            win.base
        );
    }
    out.push_str("</h2>\n");
    let _ = writeln!(
        out,
        "<svg class=\"map\" viewBox=\"0 0 {WIDTH} {height}\" width=\"{WIDTH}\" height=\"{height}\" \
         role=\"img\" aria-label=\"window {w}, one lane per rank\">"
    );
    axis(
        &mut out,
        &scale,
        lanes.iter().flatten().map(|w| w.size).max(),
    );

    for (lane, (snap, win)) in ranks.iter().zip(&lanes).enumerate() {
        let y = AXIS + lane as f64 * (LANE + GAP);
        let _ = writeln!(
            out,
            "<text class=\"lane-label\" x=\"4\" y=\"{:.1}\">rank {}</text>",
            y + LANE * 0.65,
            snap.rank
        );
        let Some(win) = win else {
            let _ = writeln!(
                out,
                "<text class=\"missing\" x=\"{LABEL}\" y=\"{:.1}\">no window {w} on this rank</text>",
                y + LANE * 0.65
            );
            if lane > 0 {
                diverged[lane].windows.push(format!("no window {w}"));
            }
            continue;
        };
        if lane > 0 {
            match reference {
                None => diverged[lane]
                    .windows
                    .push(format!("window {w} not on the reference rank")),
                Some(r) if r.size != win.size => diverged[lane].windows.push(format!(
                    "window {w} is {} (reference: {})",
                    human(win.size),
                    human(r.size)
                )),
                _ => {}
            }
        }
        let mut differing = 0;
        for region in &win.regions {
            let k = key(region);
            // In every lane's set? (A lane without the window counts as different.)
            let diff = if lane == 0 {
                sets[1..]
                    .iter()
                    .any(|s| s.as_ref().is_none_or(|s| !s.contains(&k)))
            } else {
                sets[0].as_ref().is_none_or(|s| !s.contains(&k))
            };
            if diff {
                differing += 1;
            }
            draw_region(&mut out, &scale, y, snap, region, tags, diff);
        }
        if lane > 0 && differing > 0 {
            diverged[lane].regions.push((w, differing));
        }
    }
    out.push_str("</svg>\n</section>\n");
    out
}

/// Tick labels along the top: 0, the end, and region boundaries where there is room.
fn axis(out: &mut String, scale: &Scale, end: Option<u64>) {
    let _ = writeln!(
        out,
        "<line class=\"axis\" x1=\"{LABEL}\" y1=\"{a}\" x2=\"{}\" y2=\"{a}\"/>",
        WIDTH - 10.0,
        a = AXIS - 4.0
    );
    let mut last = f64::NEG_INFINITY;
    let end_x = end.map_or(WIDTH, |e| scale.x(e));
    for (&b, &x) in scale.bounds.iter().zip(&scale.xs) {
        let is_end = Some(b) == end;
        if !is_end && (x - last < 70.0 || end_x - x < 70.0) {
            continue;
        }
        let anchor = if is_end { "end" } else { "start" };
        let _ = writeln!(
            out,
            "<line class=\"tick\" x1=\"{x:.1}\" y1=\"{}\" x2=\"{x:.1}\" y2=\"{}\"/>\
             <text class=\"tick-label\" x=\"{x:.1}\" y=\"{}\" text-anchor=\"{anchor}\">{}</text>",
            AXIS - 8.0,
            AXIS - 4.0,
            AXIS - 11.0,
            offset_label(b)
        );
        last = x;
    }
}

fn draw_region(
    out: &mut String,
    scale: &Scale,
    y: f64,
    snap: &Snapshot,
    r: &Region,
    tags: &Tags,
    diff: bool,
) {
    let x0 = scale.x(r.offset);
    let x1 = scale.x(r.offset.saturating_add(r.size));
    let width = (x1 - x0).max(0.5);
    let (class, fill, what) = match r.state {
        RegionState::Free => ("free", "url(#symheap-hatch)".to_owned(), "free".to_owned()),
        RegionState::Live | RegionState::Pending => {
            let tag = r.tag.as_deref().unwrap_or("");
            let class = if r.state == RegionState::Live {
                "block live"
            } else {
                "block pending"
            };
            let state = if r.state == RegionState::Live {
                "live"
            } else {
                "pending free"
            };
            (
                class,
                tags.colour(tag).to_owned(),
                format!("{} \u{b7} {state}", tag_name(tag)),
            )
        }
    };
    let mut tip = format!(
        "{what}\noffset {:#x} ({})\nsize {} ({} B)",
        r.offset,
        human(r.offset),
        human(r.size),
        r.size
    );
    if let Some(seq) = r.seq {
        let _ = write!(tip, "\nallocation #{seq}");
    }
    let _ = write!(tip, "\nrank {}", snap.rank);
    if diff {
        tip.push_str("\nNOT THE SAME ON EVERY RANK");
    }
    let diff_class = if diff { " diff" } else { "" };
    let _ = writeln!(
        out,
        "<rect class=\"{class}{diff_class}\" x=\"{x0:.2}\" y=\"{y:.1}\" width=\"{width:.2}\" \
         height=\"{LANE}\" fill=\"{fill}\" data-offset=\"{}\"><title>{}</title></rect>",
        r.offset,
        escape(&tip)
    );
}

/// The banner: whether every rank agrees with the reference, and if not, how each differs.
fn banner(ranks: &[&Snapshot], diverged: &[Divergence]) -> String {
    let mut out = String::new();
    let Some(reference) = ranks.first() else {
        out.push_str("<div class=\"banner diverged\">No snapshots given.</div>\n");
        return out;
    };
    let mut lines = Vec::new();
    for (snap, d) in ranks.iter().zip(diverged).skip(1) {
        let mut why = Vec::new();
        if snap.op_hash != reference.op_hash {
            why.push(format!(
                "op hash {:#018x} (rank {}: {:#018x})",
                snap.op_hash, reference.rank, reference.op_hash
            ));
        }
        if snap.windows.len() != reference.windows.len() {
            why.push(format!(
                "{} windows (rank {}: {})",
                snap.windows.len(),
                reference.rank,
                reference.windows.len()
            ));
        }
        why.extend(d.windows.iter().cloned());
        for &(w, n) in &d.regions {
            let s = if n == 1 { "" } else { "s" };
            why.push(format!("{n} region{s} of window {w} differ"));
        }
        if !why.is_empty() {
            lines.push(format!(
                "<li>rank {}: {}</li>",
                snap.rank,
                escape(&why.join("; "))
            ));
        }
    }
    let mut notes = Vec::new();
    let mut seen = HashSet::new();
    for s in ranks {
        if !seen.insert(s.rank) {
            notes.push(format!("rank {} is given more than once", s.rank));
        }
        if s.rank_count != reference.rank_count {
            notes.push(format!(
                "rank {} says the world has {} ranks (rank {}: {})",
                s.rank, s.rank_count, reference.rank, reference.rank_count
            ));
        }
    }
    if (ranks.len() as u64) < u64::from(reference.rank_count) {
        notes.push(format!(
            "snapshots of {} of {} ranks",
            ranks.len(),
            reference.rank_count
        ));
    }
    if lines.is_empty() {
        let _ = write!(
            out,
            "<div class=\"banner same\">{} rank{} agree: op hash {:#018x}, the same regions \
             at the same offsets.",
            ranks.len(),
            if ranks.len() == 1 { "" } else { "s" },
            reference.op_hash
        );
    } else {
        let _ = write!(
            out,
            "<div class=\"banner diverged\"><strong>Ranks differ from rank {}</strong> \
             (op hash {:#018x}); differing regions have a red outline:<ul>{}</ul>",
            reference.rank,
            reference.op_hash,
            lines.join("")
        );
    }
    for n in notes {
        let _ = write!(out, "<div class=\"note\">{}</div>", escape(&n));
    }
    out.push_str("</div>\n");
    out
}

fn legend(tags: &Tags) -> String {
    let mut out = String::from("<div class=\"legend\">");
    for tag in &tags.0 {
        let _ = write!(
            out,
            "<span class=\"key\"><span class=\"swatch\" style=\"background:{}\"></span>{}</span>",
            tags.colour(tag),
            escape(tag_name(tag))
        );
    }
    out.push_str(
        "<span class=\"key\"><svg class=\"swatch\" width=\"14\" height=\"14\"><rect width=\"14\" \
         height=\"14\" fill=\"url(#symheap-hatch)\"/></svg>free</span>\
         <span class=\"key\"><span class=\"swatch pending-swatch\"></span>pending free \
         (returns at the next synchronize)</span>\
         <span class=\"key\"><span class=\"swatch diff-swatch\"></span>not the same on every \
         rank</span></div>\n<p class=\"dim\">Widths grow with the logarithm of sizes (not to \
         scale), so that small blocks stay visible; hover over a region for exact numbers.</p>\n",
    );
    out
}

/// Per rank, the communicators its windows are registered in, once any rank's pool has
/// attached a group (nothing otherwise).
fn communicators(ranks: &[&Snapshot]) -> String {
    if ranks.iter().all(|s| s.stats.communicators.len() <= 1) {
        return String::new();
    }
    let mut out = String::from(
        "<h2>Communicators</h2>\n<table>\n<tr><th>rank</th><th>communicator</th>\
         <th>rank in it</th><th>windows</th><th>registrations</th>\
         <th>collectives symmetric / staged</th><th>HCCL buffers</th></tr>\n",
    );
    for s in ranks {
        for c in &s.stats.communicators {
            let _ = writeln!(
                out,
                "<tr><td>{}</td><td class=\"mono\">{}</td><td>{} of {}</td><td>{}</td><td>{}</td>\
                 <td>{} / {}</td><td>{}</td></tr>",
                s.rank,
                escape(&c.name),
                c.rank,
                c.ranks,
                c.windows,
                c.registrations,
                c.symmetric,
                c.staged,
                human(c.hccl_buffer_bytes)
            );
        }
    }
    out.push_str("</table>\n");
    out
}

/// Per rank: the accounting, then live bytes per tag.
fn summary(ranks: &[&Snapshot], tags: &Tags) -> String {
    let mut out = String::from(
        "<section class=\"summary\">\n<h2>Per rank</h2>\n<table>\n<tr><th>rank</th>\
         <th>op hash</th><th>allocated</th><th>peak</th><th>reserved</th><th>budget</th><th>free</th>\
         <th>largest free</th><th>fragmentation</th><th>pending frees</th><th>windows</th>\
         <th>allocs / frees / OOMs</th><th>collectives symmetric / staged</th>\
         <th>HCCL buffers</th><th>sleep</th></tr>\n",
    );
    for s in ranks {
        let st = &s.stats;
        let (symmetric, staged) = st.symmetric_and_staged();
        let _ = writeln!(
            out,
            "<tr><td>{}</td><td class=\"mono\">{:#018x}</td><td>{}</td><td>{}</td><td>{}</td>\
             <td>{}</td><td>{}</td><td>{}</td><td>{:.1}%</td><td>{}</td><td>{}</td><td>{} / {} / {}</td>\
             <td>{} / {}</td><td>{}</td><td>{}</td></tr>",
            s.rank,
            s.op_hash,
            human(st.allocated),
            human(st.peak_allocated),
            human(st.reserved),
            // 0: a snapshot written before budgets.
            if st.budget == 0 {
                "\u{2014}".to_owned()
            } else {
                human(st.budget)
            },
            human(st.reserved.saturating_sub(st.allocated)),
            human(st.largest_free),
            st.fragmentation * 100.0,
            st.pending_frees,
            st.windows,
            st.alloc_count,
            st.free_count,
            st.oom_count,
            symmetric,
            staged,
            human(st.hccl_buffer_bytes()),
            sleep_state(&st.sleep)
        );
    }
    out.push_str("</table>\n");
    out.push_str(&communicators(ranks));
    out.push_str("<h2>Live memory by tag</h2>\n<table>\n<tr><th>tag</th>");
    for s in ranks {
        let _ = write!(out, "<th>rank {}</th>", s.rank);
    }
    out.push_str("</tr>\n");
    for tag in &tags.0 {
        let _ = write!(
            out,
            "<tr><td><span class=\"swatch\" style=\"background:{}\"></span>{}</td>",
            tags.colour(tag),
            escape(tag_name(tag))
        );
        for s in ranks {
            match s.stats.tags.iter().find(|t| t.tag == *tag) {
                Some(t) => {
                    let b = if t.blocks == 1 { "block" } else { "blocks" };
                    let budget = match t.budget {
                        Some(budget) => format!(" of budget {}", human(budget)),
                        None => String::new(),
                    };
                    // What a sleep keeps on the host (a snapshot written before memory
                    // classes has none).
                    let kept = if t.offloadable_bytes > 0 {
                        format!(", {} offloadable", human(t.offloadable_bytes))
                    } else {
                        String::new()
                    };
                    let _ = write!(
                        out,
                        "<td>{} in {} {b}{budget}{kept} <span class=\"dim\">(peak {})</span></td>",
                        human(t.bytes),
                        t.blocks,
                        human(t.peak_bytes)
                    );
                }
                None => out.push_str("<td class=\"dim\">\u{2014}</td>"),
            }
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</table>\n</section>\n");
    out
}

/// A rank's sleep state: awake or asleep, with its sleeps so far and the bytes it keeps on
/// the host.
fn sleep_state(sleep: &symheap::SleepStats) -> String {
    match (sleep.asleep, sleep.sleeps) {
        (false, 0) => "awake".to_owned(),
        (false, n) => format!("awake ({n} sleeps)"),
        (true, n) => format!(
            "<b>asleep</b> ({n} sleeps; {} on the host)",
            human(sleep.offloaded_bytes)
        ),
    }
}

/// `bytes` in binary units: "0 B", "512 B", "1.5 KiB", "64 MiB".
fn human(bytes: u64) -> String {
    match binary_units(bytes) {
        None => format!("{bytes} B"),
        Some((value, unit)) if value.fract() == 0.0 => format!("{value:.0} {unit}"),
        Some((value, unit)) => format!("{value:.1} {unit}"),
    }
}

/// An axis label: the offset in binary units when round, else in hex.
fn offset_label(offset: u64) -> String {
    if offset == 0 || offset.is_multiple_of(1024) {
        human(offset)
    } else {
        format!("{offset:#x}")
    }
}

/// `text` safe inside HTML text and double- or single-quoted attributes.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

const CSS: &str = r#"body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.4em; margin: 0 0 .5em; }
h2 { font-size: 1.1em; margin: 1.2em 0 .3em; }
.dim { color: #777; font-weight: normal; }
.mono { font-family: ui-monospace, monospace; }
.banner { padding: .6em .9em; border-radius: 4px; margin: .5em 0; }
.banner.same { background: #e8f5e9; border: 1px solid #7cb342; }
.banner.diverged { background: #ffebee; border: 2px solid #d32f2f; }
.banner ul { margin: .3em 0 0; }
.note { margin-top: .3em; color: #8a4b00; }
.legend { display: flex; flex-wrap: wrap; gap: .4em 1.2em; margin: .6em 0; }
.key { display: inline-flex; align-items: center; gap: .35em; }
.swatch { display: inline-block; width: 14px; height: 14px; border-radius: 2px;
  vertical-align: middle; margin-right: .3em; }
.pending-swatch { background: #ccc; opacity: .6; outline: 1px dashed #333; }
.diff-swatch { outline: 2px solid #d50000; }
svg.map { max-width: 100%; height: auto; display: block; }
svg.map .lane-label { font-size: 13px; fill: #333; }
svg.map .missing { font-size: 12px; fill: #d50000; }
svg.map .axis, svg.map .tick { stroke: #999; stroke-width: 1; }
svg.map .tick-label { font-size: 10px; fill: #666; }
svg.map rect { stroke: #fff; stroke-width: .5; }
svg.map rect.pending { fill-opacity: .35; stroke: #333; stroke-dasharray: 3 2; stroke-width: 1; }
svg.map rect.diff { stroke: #d50000; stroke-width: 2.5; stroke-dasharray: none; }
svg.map rect:hover, svg.map rect.same-offset { stroke: #000; stroke-width: 2; }
table { border-collapse: collapse; margin: .3em 0; }
th, td { border: 1px solid #ddd; padding: .25em .6em; text-align: right; }
th { background: #f5f5f5; }
td:first-child { text-align: left; }
"#;

/// The patterns the regions use (one place for the whole page: SVG ids are page-wide).
const DEFS: &str = r##"<svg width="0" height="0" style="position:absolute" aria-hidden="true"><defs>
<pattern id="symheap-hatch" patternUnits="userSpaceOnUse" width="6" height="6" patternTransform="rotate(45)">
<rect width="6" height="6" fill="#eeeeee"/><line x1="0" y1="0" x2="0" y2="6" stroke="#c4c4c4" stroke-width="2"/>
</pattern></defs></svg>
"##;

/// Hovering a region outlines the regions at the same offset in the other lanes.
const SCRIPT: &str = r#"(function () {
  "use strict";
  document.querySelectorAll("svg.map").forEach(function (svg) {
    var marked = [];
    svg.addEventListener("mouseover", function (e) {
      var offset = e.target.getAttribute && e.target.getAttribute("data-offset");
      marked.forEach(function (r) { r.classList.remove("same-offset"); });
      marked = [];
      if (offset === null || offset === undefined) return;
      svg.querySelectorAll('rect[data-offset="' + offset + '"]').forEach(function (r) {
        r.classList.add("same-offset");
        marked.push(r);
      });
    });
  });
})();
"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_units() {
        assert_eq!(human(0), "0 B");
        assert_eq!(human(1023), "1023 B");
        assert_eq!(human(1024), "1 KiB");
        assert_eq!(human(1536), "1.5 KiB");
        assert_eq!(human(64 << 20), "64 MiB");
    }

    #[test]
    fn escapes_markup() {
        assert_eq!(
            escape(r#"<a href="x">&'"#),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
    }

    #[test]
    fn empty_input_is_a_page() {
        let html = render(&[]);
        assert!(html.contains("No snapshots given"));
        assert!(html.ends_with("</html>\n"));
    }
}
