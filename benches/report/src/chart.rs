//! The SVG chart: one panel per group, a horizontal bar per runtime at its
//! median, a line over min..max, on a log time axis (husk's milliseconds and
//! Docker's hundreds of milliseconds on one page). plotters' SVG backend
//! writes text as <text> elements, so no font files are read.

use crate::model::{Group, fmt_time};
use plotters::coord::ranged1d::SegmentValue;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::path::Path;

const WIDTH: u32 = 960;
const ROW: u32 = 30;
const PANEL_EXTRA: u32 = 78;
const HUSK: RGBColor = RGBColor(0xd9, 0x5f, 0x02);
const PEER: RGBColor = RGBColor(0x4c, 0x72, 0xb0);

pub fn draw(path: &Path, title: &str, groups: &[Group<'_>]) -> Result<(), String> {
    let groups: Vec<&Group<'_>> = groups.iter().filter(|g| !g.benches.is_empty()).collect();
    let heights: Vec<u32> = groups.iter().map(|g| PANEL_EXTRA + ROW * g.benches.len() as u32).collect();
    let total = heights.iter().sum::<u32>() + 50;
    let root = SVGBackend::new(path, (WIDTH, total)).into_drawing_area();
    let err = |e: &dyn std::fmt::Display| format!("{}: {e}", path.display());
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let body = root.titled(title, ("sans-serif", 20)).map_err(|e| err(&e))?;
    let mut breaks = Vec::new();
    let mut y = 0;
    for h in &heights[..heights.len().saturating_sub(1)] {
        y += h;
        breaks.push(y);
    }
    let panels = body.split_by_breakpoints::<u32, u32, [u32; 0], _>([], breaks);
    for (area, g) in panels.iter().zip(&groups) {
        panel(area, g).map_err(|e| err(&e))?;
    }
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

type Area<'a> = DrawingArea<SVGBackend<'a>, plotters::coord::Shift>;

fn panel(area: &Area<'_>, g: &Group<'_>) -> Result<(), Box<dyn std::error::Error>> {
    let n = g.benches.len() as i32;
    let lo = g.benches.iter().map(|b| b.min).fold(f64::INFINITY, f64::min) * 1000.0 * 0.6;
    let hi = g.benches.iter().map(|b| b.max).fold(0.0, f64::max) * 1000.0 * 4.0;
    let names: Vec<String> = g.benches.iter().map(|b| b.command.clone()).collect();
    // Row 0 is at the bottom; the first benchmark goes on top.
    let row = |i: usize| n - 1 - i as i32;
    let mut chart = ChartBuilder::on(area)
        .caption(&g.meta.title, ("sans-serif", 16))
        .margin(6)
        .margin_right(20)
        .x_label_area_size(34)
        .y_label_area_size(250)
        .build_cartesian_2d((lo.max(0.01)..hi).log_scale(), (0..n - 1).into_segmented())?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .light_line_style(TRANSPARENT)
        .x_desc("milliseconds (log scale)")
        .x_label_formatter(&|v| if *v >= 1.0 { format!("{v:.0}") } else { format!("{v:.2}") })
        .y_labels(names.len())
        .y_label_formatter(&|v| match v {
            SegmentValue::CenterOf(i) => names.get((n - 1 - i) as usize).cloned().unwrap_or_default(),
            _ => String::new(),
        })
        .label_style(("sans-serif", 12))
        .draw()?;
    let base = lo.max(0.01);
    for (i, b) in g.benches.iter().enumerate() {
        let is_husk = b.command.starts_with("husk");
        let color = if is_husk { HUSK } else { PEER };
        let r = row(i);
        let median = b.median * 1000.0;
        let bar =
            Rectangle::new([(base, SegmentValue::Exact(r)), (median, SegmentValue::Exact(r + 1))], color.filled());
        // Shrink the bar to the middle 60% of its row.
        chart.draw_series(std::iter::once(bar).map(|mut bar| {
            bar.set_margin(6, 6, 0, 0);
            bar
        }))?;
        chart.draw_series(std::iter::once(PathElement::new(
            vec![(b.min * 1000.0, SegmentValue::CenterOf(r)), (b.max * 1000.0, SegmentValue::CenterOf(r))],
            BLACK.stroke_width(1),
        )))?;
        let label = fmt_time(b.median);
        let style = TextStyle::from(("sans-serif", 12).into_font()).pos(Pos::new(HPos::Left, VPos::Center));
        chart.draw_series(std::iter::once(Text::new(
            label,
            (b.max * 1000.0 * 1.12, SegmentValue::CenterOf(r)),
            style,
        )))?;
    }
    Ok(())
}
