//! The score of a suite that runs its own checks (`harness = false`): the real-cloud suites
//! start one cloud and run their checks in order, so they count passes and failures here.
//!
//! A failing check prints its error where it happens, and again at the very end of the run,
//! after the logs the suite dumps: CI keeps only the tail of a run's output, and the reason a
//! check failed must be in it.

use std::process::ExitCode;
use std::time::Duration;

/// Passes and failures of one suite's checks.
#[derive(Debug)]
pub struct Tally {
    suite: &'static str,
    passed: usize,
    failures: Vec<(String, String)>,
}

impl Tally {
    /// An empty tally for the suite named `suite` (the prefix of its last line).
    pub fn new(suite: &'static str) -> Tally {
        Tally {
            suite,
            passed: 0,
            failures: Vec::new(),
        }
    }

    /// Records the outcome of the check `name`, which took `took`, and prints it in the
    /// `cargo test` form (`test <name> ... ok` / `... FAILED`).
    pub fn record(&mut self, name: &str, took: Duration, outcome: anyhow::Result<()>) {
        match outcome {
            Ok(()) => {
                self.passed += 1;
                println!("test {name} ... ok ({took:.1?})");
            }
            Err(e) => {
                let error = format!("{e:#}");
                println!("test {name} ... FAILED ({took:.1?})\n{error}");
                self.failures.push((name.to_owned(), error));
            }
        }
    }

    /// Whether any check failed so far.
    pub fn failed(&self) -> bool {
        !self.failures.is_empty()
    }

    /// Prints each failure again, then `<suite>: N passed, M failed`; success only when
    /// nothing failed.
    pub fn finish(self) -> ExitCode {
        if !self.failures.is_empty() {
            println!("--- {}: failures ---", self.suite);
            for (name, error) in &self.failures {
                println!("{name}: {error}");
            }
        }
        println!(
            "{}: {} passed, {} failed",
            self.suite,
            self.passed,
            self.failures.len()
        );
        if self.failures.is_empty() {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        }
    }
}
