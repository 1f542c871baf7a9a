//! Reading the embedded PTX without a GPU: which kernels it exports, the `u32` facts each variant
//! exports beside its kernel (shared memory, declared barriers per tile), and how many block
//! barriers sit inside each kernel's KV-tile loop.

use std::collections::BTreeMap;

/// One `.entry` of a PTX module: its name and its instruction lines.
#[derive(Debug, Clone)]
pub struct Entry<'a> {
    /// The entry point's name.
    pub name: &'a str,
    /// Its body's lines, trimmed, from the opening `{` to the matching `}`.
    pub body: Vec<&'a str>,
}

/// The kernels (`.entry`) of a PTX module, in order.
pub fn entries(ptx: &str) -> Vec<Entry<'_>> {
    let mut out = Vec::new();
    let mut lines = ptx.lines();
    while let Some(line) = lines.next() {
        let Some(rest) = line.trim_start().strip_prefix(".visible .entry ") else {
            continue;
        };
        let name = rest.split('(').next().unwrap_or(rest).trim();
        let mut body = Vec::new();
        let mut depth = 0i32;
        let mut started = false;
        for line in lines.by_ref() {
            let trimmed = line.trim();
            depth += trimmed.matches('{').count() as i32 - trimmed.matches('}').count() as i32;
            if trimmed.starts_with('{') {
                started = true;
            }
            if started {
                body.push(trimmed);
                if depth == 0 {
                    break;
                }
            }
        }
        out.push(Entry { name, body });
    }
    out
}

/// The `u32` globals of a module: the library reads its launch facts with it, so it lives there.
pub use flashrs::embedded::u32_globals;

/// True for an instruction that makes the whole block wait (`bar.sync`, `barrier.sync`,
/// `bar.red`, `barrier.cta.*`), not for `bar.warp.sync`, nor for a named barrier given a thread
/// count (`bar.sync 1, 256`: some warps waiting for others, see `is_named_barrier`).
pub fn is_block_barrier(line: &str) -> bool {
    is_barrier_op(line) && !has_thread_count(line)
}

/// True for a barrier among a given number of threads (`bar.sync 1, 256`, `bar.arrive 2, 256`):
/// the warpgroup scheduling of `flash_wgmma`'s ping-pong.
pub fn is_named_barrier(line: &str) -> bool {
    (is_barrier_op(line)
        || strip_guard(line).starts_with("bar.arrive")
        || strip_guard(line).starts_with("barrier.arrive"))
        && has_thread_count(line)
}

fn has_thread_count(line: &str) -> bool {
    let operands = strip_guard(line)
        .split_once(char::is_whitespace)
        .map_or("", |(_, rest)| rest);
    operands.contains(',')
}

fn strip_guard(line: &str) -> &str {
    match line.strip_prefix('@') {
        Some(guarded) => guarded
            .split_once(char::is_whitespace)
            .map_or("", |(_, rest)| rest.trim_start()),
        None => line,
    }
}

fn is_barrier_op(line: &str) -> bool {
    // Skip a guard predicate (`@%p1 ` or `@!%p1 `).
    let instruction = strip_guard(line);
    [
        "bar.sync",
        "barrier.sync",
        "bar.red",
        "barrier.red",
        "barrier.cta",
        "bar.cta",
    ]
    .iter()
    .any(|op| instruction.starts_with(op))
}

/// Block barriers inside the kernel's KV-tile loop. Every backward branch spans a loop from its
/// target label to itself; spans that overlap belong to one loop nest (LLVM may place a loop's
/// latch block above its header, so one loop can show several overlapping spans), and the nest
/// that contains block barriers is the tile loop. `None` when no loop holds a barrier.
pub fn barriers_in_loop(entry: &Entry<'_>) -> Option<usize> {
    let mut labels = BTreeMap::new();
    for (i, line) in entry.body.iter().enumerate() {
        if let Some(label) = line.strip_suffix(':') {
            labels.insert(label, i);
        }
    }
    let mut spans: Vec<(usize, usize)> = Vec::new(); // (target label line, branch line)
    for (i, line) in entry.body.iter().enumerate() {
        let Some(pos) = line.find("bra") else { continue };
        let target = line[pos..]
            .split_whitespace()
            .nth(1)
            .map(|t| t.trim_end_matches(';'));
        if let Some(&header) = target.and_then(|t| labels.get(t)) {
            if header < i {
                spans.push((header, i));
            }
        }
    }
    spans.sort_unstable();
    let mut nests: Vec<(usize, usize)> = Vec::new();
    for (from, to) in spans {
        match nests.last_mut() {
            Some(last) if from <= last.1 => last.1 = last.1.max(to),
            _ => nests.push((from, to)),
        }
    }
    let count = |(from, to): (usize, usize)| {
        entry.body[from..=to]
            .iter()
            .filter(|l| is_block_barrier(l))
            .count()
    };
    nests.into_iter().map(count).filter(|&n| n > 0).max()
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = r#"
.visible .global .align 4 .b8 k_smem_bytes[4] = {0, 84, 1};
.visible .global .align 4 .b8 k_barriers_per_tile[4] = {2};
.visible .global .align 4 .b8 naive_barriers_per_tile[4];
.visible .entry k(
	.param .u64 .ptr .align 1 k_param_0
)
{
	bar.sync 0;
$L__BB0_1:
	bar.sync 0;
$L__BB0_2:
	add.s32 %r1, %r1, 1;
	@%p1 bra $L__BB0_2;
	bar.warp.sync -1;
	@%p2 bar.sync 0;
	@%p3 bra $L__BB0_1;
	bar.sync 0;
	ret;
}
.visible .entry naive(
	.param .u64 .ptr .align 1 naive_param_0
)
{
$L__BB1_1:
	@%p3 bra $L__BB1_1;
	ret;
}
"#;

    #[test]
    fn finds_entries_and_globals() {
        let names: Vec<_> = entries(SAMPLE).iter().map(|e| e.name).collect();
        assert_eq!(names, ["k", "naive"]);
        let globals = u32_globals(SAMPLE);
        assert_eq!(globals["k_smem_bytes"], 87040);
        assert_eq!(globals["k_barriers_per_tile"], 2);
        assert_eq!(globals["naive_barriers_per_tile"], 0);
    }

    #[test]
    fn counts_block_barriers_in_the_outer_loop_only() {
        let all = entries(SAMPLE);
        // Two bar.sync inside $L__BB0_1's loop (one predicated); the ones before and after and
        // the warp barrier do not count.
        assert_eq!(barriers_in_loop(&all[0]), Some(2));
        assert_eq!(barriers_in_loop(&all[1]), None);
    }

    #[test]
    fn a_latch_placed_above_its_header_still_counts() {
        // The shape LLVM gives a tile loop with a rolled inner loop: the barrier block sits above
        // the header and is reached by backward branches from the inner loop's exit.
        let ptx = ".visible .entry r(\n)\n{\n\tbar.sync 0;\n\tbra.uni $L1;\n$L0:\n\tbar.sync 0;\n\t@%p1 bra $L2;\n$L1:\n\tbar.sync 0;\n$L3:\n\t@%p2 bra $L0;\n\t@%p3 bra $L3;\n\tbra.uni $L1;\n$L2:\n\tret;\n}\n";
        let all = entries(ptx);
        assert_eq!(barriers_in_loop(&all[0]), Some(2));
    }

    #[test]
    fn block_barrier_recognition() {
        assert!(is_block_barrier("bar.sync 0;"));
        assert!(is_block_barrier("@%p1 bar.sync 0;"));
        assert!(is_block_barrier("barrier.sync 0;"));
        assert!(!is_block_barrier("bar.warp.sync -1;"));
        // Named barriers with a thread count schedule some warps; they are not block barriers.
        assert!(!is_block_barrier("bar.sync %r12, 256;"));
        assert!(!is_block_barrier("bar.arrive %r13, 256;"));
        assert!(is_named_barrier("bar.sync %r12, 256;"));
        assert!(is_named_barrier("@%p3 bar.arrive 2, 256;"));
        assert!(!is_named_barrier("bar.sync 0;"));
        assert!(!is_block_barrier("bra.uni $L__BB0_1;"));
    }
}
