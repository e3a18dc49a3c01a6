//! `optional_section!`: a config section whose every key may be absent.
//!
//! KubeEdge's kubelet-derived sections (`tailoredKubeletConfig` and the
//! Kubernetes types inside it) are Go structs of pointers and `omitempty`
//! fields: a key either has a value or is not written at all. Modelling each
//! key as an `Option` keeps that distinction, so Wedge prints back exactly the
//! keys a file had, and keys that only an older KubeEdge wrote need no
//! made-up default. The macro writes the repetitive parts: the `Option`
//! wrapper, skipping `None` when printing, and a `Default` that is KubeEdge's
//! default where it has one (`key: Type = value`) and absent otherwise.

/// Declares a struct whose fields are `Option<T>`, with serde attributes for
/// a config section (`camelCase`, unknown keys refused, missing keys from
/// `Default`), and a `Default` built from the `= value` given per field.
macro_rules! optional_section {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $(
                $(#[$field_meta:meta])*
                $field:ident : $ty:ty $(= $default:expr)?
            ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
        #[serde(default, deny_unknown_fields, rename_all = "camelCase")]
        pub struct $name {
            $(
                $(#[$field_meta])*
                #[serde(skip_serializing_if = "Option::is_none")]
                pub $field: Option<$ty>,
            )*
        }

        impl Default for $name {
            fn default() -> Self {
                Self {
                    $( $field: optional_section!(@default $($default)?), )*
                }
            }
        }
    };
    (@default) => { None };
    (@default $default:expr) => { Some(($default).into()) };
}

pub(crate) use optional_section;
