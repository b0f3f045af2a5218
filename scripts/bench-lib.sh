# Sourced by scripts/bench-targets and scripts/bench-seeds, not run: the checkout's root as the
# working directory, the release build, and `run NAME CMD...`, which logs CMD's output to
# $out/NAME.log (the caller sets `out`) with the commit and the 1-minute load average before and
# after: these benchmarks want an idle machine, and the log says whether they had one.
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [ -f "$HOME/.cargo/env" ]; then . "$HOME/.cargo/env"; fi

waffle=target/release/waffle

bench_build() {
  cargo build --release --workspace --locked
}

load() { cut -d' ' -f1 /proc/loadavg; }

run() {
  local name=$1
  shift
  echo "== $name: $* (commit $(git rev-parse --short HEAD), load $(load))" | tee "$out/$name.log"
  "$@" 2>&1 | tee -a "$out/$name.log"
  echo "== $name: done, load $(load)" | tee -a "$out/$name.log"
}
