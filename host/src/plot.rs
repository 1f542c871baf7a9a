//! `bench --plot FILE.svg`: TFLOP/s against sequence length for our kernels and every peer, one
//! panel per (head dim, causal) pair.

use std::collections::BTreeSet;
use std::path::Path;

use plotters::prelude::*;

use crate::report::{Row, SavedRows};
use crate::Failure;

/// `plot`: redraws the plot of a `bench --json` report (no GPU needed).
#[derive(clap::Args)]
pub struct Args {
    /// A JSON report written by `bench --json`.
    #[arg(long)]
    json: std::path::PathBuf,
    /// The .svg to write.
    #[arg(long)]
    out: std::path::PathBuf,
}

pub fn run(args: Args) -> Result<(), Failure> {
    check_path(&args.out)?;
    let text = std::fs::read_to_string(&args.json)
        .map_err(|e| Failure::Usage(format!("{}: {e}", args.json.display())))?;
    let report: SavedRows = serde_json::from_str(&text)
        .map_err(|e| Failure::Usage(format!("{}: not a bench report ({e})", args.json.display())))?;
    let rows: Vec<Row> = report
        .results
        .into_iter()
        .filter(|r| plotted(&r.kernel))
        .collect();
    plot(&args.out, &rows, &report.gpu).map_err(|failure| match failure {
        Failure::Usage(message) => Failure::Usage(format!("{message} (from {})", args.json.display())),
        other => other,
    })?;
    println!("{}", args.out.display());
    Ok(())
}

/// The series worth a line: the tensor-core kernels and the peers (`naive` and `flash_scalar` sit
/// two orders of magnitude lower and would flatten the chart).
pub fn plotted(kernel: &str) -> bool {
    !(kernel == "naive" || kernel.starts_with("flash_scalar"))
}

/// Refuses a path the plotter cannot write, before any measuring starts.
pub fn check_path(path: &Path) -> Result<(), Failure> {
    if path.extension().and_then(|e| e.to_str()) != Some("svg") {
        return Err(Failure::Usage(format!(
            "{}: only .svg plots are written (a PNG needs system fonts; convert the SVG, e.g. with rsvg-convert)",
            path.display()
        )));
    }
    crate::inputs::check_output(path)
}

/// Draws `rows` into the .svg at `path`; an error names the path.
pub fn plot(path: &Path, rows: &[Row], gpu: &str) -> Result<(), Failure> {
    check_path(path)?;
    draw(path, rows, gpu).map_err(|failure| match failure {
        Failure::Usage(message) => Failure::Usage(format!("{}: {message}", path.display())),
        other => other,
    })
}

fn draw(path: &Path, rows: &[Row], gpu: &str) -> Result<(), Failure> {
    let panels: BTreeSet<(usize, bool)> = rows.iter().map(|r| (r.shape[3], r.causal)).collect();
    let panels: Vec<_> = panels.into_iter().collect();
    if panels.is_empty() {
        return Err(Failure::Usage(
            "nothing to plot (no rows of our kernels or the peers)".into(),
        ));
    }
    let columns = panels.len().min(2);
    let grid_rows = panels.len().div_ceil(columns);
    let root = SVGBackend::new(path, (720 * columns as u32, 480 * grid_rows as u32)).into_drawing_area();
    root.fill(&WHITE).map_err(draw_error)?;
    let dtype = rows.first().map_or("float16", |r| r.dtype.as_str());
    let root = root
        .titled(&format!("attention forward, {dtype}, {gpu}"), ("sans-serif", 20))
        .map_err(draw_error)?;
    let areas = root.split_evenly((grid_rows, columns));
    // One colour per series name across panels.
    let names: Vec<String> = rows
        .iter()
        .map(|r| r.kernel.clone())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    for (area, &(head_dim, causal)) in areas.iter().zip(&panels) {
        let in_panel: Vec<&Row> = rows
            .iter()
            .filter(|r| r.shape[3] == head_dim && r.causal == causal)
            .collect();
        let max_seq = in_panel.iter().map(|r| r.shape[2]).max().unwrap_or(1) as f64;
        let min_seq = in_panel.iter().map(|r| r.shape[2]).min().unwrap_or(1) as f64;
        // Headroom above the data for the legend.
        let max_tflops = in_panel.iter().map(|r| r.tflops).fold(1.0, f64::max) * 1.6;
        let mut chart = ChartBuilder::on(area)
            .caption(
                format!("D = {head_dim}{}", if causal { ", causal" } else { "" }),
                ("sans-serif", 16),
            )
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(48)
            .build_cartesian_2d((min_seq / 1.3..max_seq * 1.3).log_scale(), 0.0..max_tflops)
            .map_err(draw_error)?;
        chart
            .configure_mesh()
            .x_desc("sequence length (at each length, the shape with the most B*H)")
            .y_desc("TFLOP/s")
            .draw()
            .map_err(draw_error)?;
        for (index, name) in names.iter().enumerate() {
            // Several shapes can share a sequence length (B*H differs): plot the one with the most
            // heads, the one that fills the GPU.
            let mut by_seq: std::collections::BTreeMap<usize, &Row> = std::collections::BTreeMap::new();
            for r in in_panel.iter().filter(|r| &r.kernel == name) {
                let heads = |r: &Row| r.shape[0] * r.shape[1];
                let entry = by_seq.entry(r.shape[2]).or_insert(r);
                if heads(r) > heads(entry) {
                    *entry = r;
                }
            }
            let mut points: Vec<(f64, f64)> =
                by_seq.values().map(|r| (r.shape[2] as f64, r.tflops)).collect();
            if points.is_empty() {
                continue;
            }
            points.sort_by(|a, b| a.0.total_cmp(&b.0));
            let peer = in_panel.iter().any(|r| &r.kernel == name && r.peer);
            let color = series_color(name, index);
            let style = if peer {
                color.stroke_width(1)
            } else {
                color.stroke_width(3)
            };
            chart
                .draw_series(LineSeries::new(points.clone(), style))
                .map_err(draw_error)?
                .label(name.as_str())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], style));
            chart
                .draw_series(points.iter().map(|&p| Circle::new(p, 3, color.filled())))
                .map_err(draw_error)?;
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .label_font(("sans-serif", 11))
            .position(SeriesLabelPosition::UpperLeft)
            .draw()
            .map_err(draw_error)?;
    }
    root.present().map_err(draw_error)?;
    Ok(())
}

/// Peers in fixed colours (thin lines), ours from a palette of strong colours (thick lines).
fn series_color(name: &str, index: usize) -> RGBAColor {
    const OURS: [RGBColor; 8] = [
        RGBColor(0, 114, 178),
        RGBColor(0, 158, 115),
        RGBColor(213, 94, 0),
        RGBColor(204, 121, 167),
        RGBColor(86, 180, 233),
        RGBColor(230, 159, 0),
        RGBColor(120, 60, 170),
        RGBColor(90, 90, 30),
    ];
    match name {
        "torch_flash" => RED.to_rgba(),
        "torch_cudnn" => BLACK.to_rgba(),
        "torch_efficient" => RGBColor(128, 128, 128).to_rgba(),
        "cublas" => RGBColor(140, 80, 40).to_rgba(),
        "cutensor" => RGBColor(60, 120, 60).to_rgba(),
        crate::peers::FA3_BACKEND => RGBColor(150, 0, 150).to_rgba(),
        _ => OURS[index % OURS.len()].to_rgba(),
    }
}

fn draw_error<E: std::fmt::Display>(error: E) -> Failure {
    Failure::Usage(format!("plot: {error}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use flashrs::Shape;

    #[test]
    fn draws_one_panel_per_head_dim_and_mask() {
        let row = |kernel: &str, s: usize, d: usize, causal: bool, us: f64, peer: bool| {
            crate::report::row_from(
                kernel.into(),
                Shape::new(2, 16, s, d),
                flashrs::DType::F16,
                causal,
                1,
                vec![us; 3],
                peer.then(|| "flash".into()),
            )
            .ok()
            .unwrap()
        };
        let rows = vec![
            row("ours", 512, 64, false, 10.0, false),
            row("ours", 4096, 64, false, 300.0, false),
            row("torch_flash", 512, 64, false, 12.0, true),
            row("ours", 4096, 128, true, 400.0, false),
        ];
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.svg");
        plot(&path, &rows, "test GPU").ok().unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(svg.starts_with("<svg") && svg.contains("D = 64") && svg.contains("D = 128, causal"));
        assert!(svg.contains("torch_flash") && svg.contains("attention forward, float16, test GPU"));
        assert!(check_path(&dir.path().join("p.png")).is_err());
        // Every error names the path: a missing directory, nothing to draw, an unreadable report.
        let message = |r: Result<(), Failure>| match r {
            Err(Failure::Usage(m)) => m,
            _ => String::new(),
        };
        let nowhere = dir.path().join("no/such/p.svg");
        assert!(message(check_path(&nowhere)).contains("no/such/p.svg"));
        assert!(message(plot(&path, &[], "g")).starts_with(&path.display().to_string()));
        let args = |json: &Path| Args {
            json: json.to_path_buf(),
            out: path.clone(),
        };
        let missing = dir.path().join("missing.json");
        assert!(message(run(args(&missing))).contains("missing.json"));
        let garbage = dir.path().join("garbage.json");
        std::fs::write(&garbage, "{").unwrap();
        assert!(message(run(args(&garbage))).contains("garbage.json"));
    }
}
