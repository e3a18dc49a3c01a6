//! `threshold`: a twin handler that checks ranges and converts units.
//!
//! Config (the manifest's `[config]`, as JSON):
//!
//! ```json
//! {"rules": [
//!   {"property": "temperature", "min": -40.0, "max": 85.0, "action": "reject"},
//!   {"property": "humidity", "min": 0, "max": 100, "action": "clamp"},
//!   {"property": "pressure", "from_unit": "psi", "to_unit": "kpa", "decimals": 2}
//! ]}
//! ```
//!
//! Rule keys: `property` (required), `min` / `max` with `action` (`reject`, the default, or
//! `clamp`), `from_unit` / `to_unit` (converted first, so the range is in `to_unit`),
//! `decimals` (rounding of a converted float), and the filters `side` (`actual` | `desired`)
//! and `source` (`mapper` | `cloud`); a rule without filters applies to every update of its
//! property. Rules of one property apply in order. Integers stay integers (rounded after a
//! conversion, clamped to the integral part of the range). A numeric rule rejects text and
//! booleans. Properties without rules are accepted.

mod rules;

use wedge_guest::{TwinHandler, TwinUpdate, Verdict};

use crate::rules::Rules;

struct Threshold {
    rules: Rules,
}

impl TwinHandler for Threshold {
    fn init(config: &str) -> Result<Self, String> {
        let rules = Rules::from_json(config)?;
        wedge_guest::info!("threshold ready with {} rules", rules.len());
        Ok(Threshold { rules })
    }

    fn on_update(&mut self, update: &TwinUpdate) -> Verdict {
        let verdict = self.rules.apply(update);
        if let Verdict::Reject(reason) = &verdict {
            wedge_guest::debug!("rejected {}/{}: {reason}", update.device, update.property);
        }
        verdict
    }
}

wedge_guest::export_twin_handler!(Threshold);
