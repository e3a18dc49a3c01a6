//! A point: one device property with its visitor parsed and checked once, at `add_device`,
//! so a poll never meets a bad visitor and both mappers refuse the same visitors.

use wedge_guest::{Property, ValueType};

use crate::codec::Visitor;

/// A property a mapper reads and writes, ready to use.
#[derive(Debug, Clone)]
pub struct Point {
    /// The property as the device declares it.
    pub property: Property,
    /// Its declared value type, parsed.
    pub kind: ValueType,
    /// Where it lives on the device and how its bits read.
    pub visitor: Visitor,
}

impl Point {
    /// Parses and validates `property`'s visitor; the error names the device and property.
    pub fn parse(device: &str, property: Property) -> Result<Point, String> {
        let visitor: Visitor = property.visitor_as()?;
        visitor
            .validate()
            .map_err(|e| format!("device {device} property {}: {e}", property.name))?;
        Ok(Point {
            kind: property.kind(),
            property,
            visitor,
        })
    }

    /// Every property of a device, or the first error.
    pub fn parse_all(device: &str, properties: Vec<Property>) -> Result<Vec<Point>, String> {
        properties
            .into_iter()
            .map(|p| Point::parse(device, p))
            .collect()
    }

    /// The property's name.
    pub fn name(&self) -> &str {
        &self.property.name
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pdu::Request;

    #[test]
    fn parses_and_checks_visitors() {
        let p = Point::parse(
            "default/plc",
            Property::new(
                "t",
                "float",
                r#"{"register":"HoldingRegister","offset":3,"scale":0.1}"#,
            ),
        )
        .unwrap();
        assert_eq!((p.name(), p.kind), ("t", ValueType::Float));
        assert_eq!(
            p.visitor.read_request(),
            Request::ReadHoldingRegisters {
                address: 3,
                count: 1
            }
        );
        let err = Point::parse(
            "default/plc",
            Property::new(
                "t",
                "int",
                r#"{"register":"HoldingRegister","offset":0,"limit":3}"#,
            ),
        )
        .unwrap_err();
        assert!(
            err.starts_with("device default/plc property t: limit"),
            "{err}"
        );
        let err = Point::parse_all(
            "d",
            vec![Property::new(
                "u",
                "int",
                r#"{"register":"Nowhere","offset":0}"#,
            )],
        )
        .unwrap_err();
        assert!(err.starts_with("property u: invalid visitor"), "{err}");
    }
}
