//! The progress bar of `waffle warm`: pages warmed out of pages planned, and
//! what is warmed, drawn from the first look at the warm (nothing before it).

use std::cell::OnceCell;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use waffle_warm_client::Seen;

#[derive(Default)]
pub struct Bar {
    bar: OnceCell<ProgressBar>,
}

impl Bar {
    /// Moves the bar to `s` (its length: the pages planned, once known).
    pub fn seen(&self, s: &Seen<'_>) {
        let bar = self.bar.get_or_init(pages_bar);
        bar.set_message(s.what.to_string());
        bar.set_length(s.planned_pages.max(1));
        bar.set_position(s.done_pages);
    }

    /// Takes the bar off the terminal, for the summary lines.
    pub fn finish(&self) {
        if let Some(bar) = self.bar.get() {
            bar.finish_and_clear();
        }
    }
}

fn pages_bar() -> ProgressBar {
    let bar = ProgressBar::new(1);
    let style = ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:40} {pos}/{len} pages  {msg}");
    bar.set_style(style.expect("a valid template"));
    bar.enable_steady_tick(Duration::from_millis(200));
    bar
}
