//! Local definitions: KubeEdge `Device` / `DeviceModel` YAML files (`wedge.devices.dir`), for
//! nodes that define their devices themselves.

use std::path::{Path, PathBuf};

use super::DefinitionError;
use super::kube::{KubeObject, parse_yaml};

/// What a directory held.
#[derive(Debug, Default)]
pub struct DirectoryLoad {
    /// The objects of every file that could be read, files in name order, documents in file
    /// order.
    pub objects: Vec<KubeObject>,
    /// One error per file that could not be read; nothing of such a file is in `objects`.
    pub errors: Vec<DefinitionError>,
}

/// Reads every Device and DeviceModel of one YAML file. Errors name the file (and the document).
pub fn load_file(path: &Path) -> Result<Vec<KubeObject>, DefinitionError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| DefinitionError::new(format!("cannot read: {e}")).in_file(path.to_owned()))?;
    parse_yaml(&text).map_err(|e| e.in_file(path.to_owned()))
}

fn is_yaml(path: &Path) -> bool {
    path.is_file()
        && path
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| e == "yaml" || e == "yml")
}

/// Reads every `*.yaml` / `*.yml` file of `dir` (not its subdirectories), in file-name order,
/// so a model in `00-models.yaml` is read before the devices of `10-devices.yaml`. A file that
/// fails is reported in [`DirectoryLoad::errors`] and skipped as a whole; the others still
/// load. Only an unreadable directory fails the call.
pub fn load_directory(dir: &Path) -> Result<DirectoryLoad, DefinitionError> {
    let entries = std::fs::read_dir(dir).map_err(|e| {
        DefinitionError::new(format!("cannot read the directory: {e}")).in_file(dir.to_owned())
    })?;
    let mut files: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| is_yaml(p))
        .collect();
    files.sort();
    let mut load = DirectoryLoad::default();
    for file in files {
        match load_file(&file) {
            Ok(objects) => load.objects.extend(objects),
            Err(e) => load.errors.push(e),
        }
    }
    Ok(load)
}
