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
    read_file(path).map(|(_, objects)| objects)
}

/// [`load_file`], also giving the file's text (for a reader that wants the documents as
/// they are written, having checked them the same way).
pub fn read_file(path: &Path) -> Result<(String, Vec<KubeObject>), DefinitionError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| DefinitionError::new(format!("cannot read: {e}")).in_file(path.to_owned()))?;
    let objects = parse_yaml(&text).map_err(|e| e.in_file(path.to_owned()))?;
    Ok((text, objects))
}

fn is_yaml(path: &Path) -> bool {
    path.is_file()
        && path
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| e == "yaml" || e == "yml")
}

/// The `*.yaml` / `*.yml` files of `dir` (not its subdirectories), in file-name order. Only
/// an unreadable directory fails.
pub fn yaml_files(dir: &Path) -> Result<Vec<PathBuf>, DefinitionError> {
    let entries = std::fs::read_dir(dir).map_err(|e| {
        DefinitionError::new(format!("cannot read the directory: {e}")).in_file(dir.to_owned())
    })?;
    let mut files: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| is_yaml(p))
        .collect();
    files.sort();
    Ok(files)
}

/// Reads every `*.yaml` / `*.yml` file of `dir` (not its subdirectories), in file-name order,
/// so a model in `00-models.yaml` is read before the devices of `10-devices.yaml`. A file that
/// fails is reported in [`DirectoryLoad::errors`] and skipped as a whole; the others still
/// load. Only an unreadable directory fails the call.
pub fn load_directory(dir: &Path) -> Result<DirectoryLoad, DefinitionError> {
    let mut load = DirectoryLoad::default();
    for file in yaml_files(dir)? {
        match load_file(&file) {
            Ok(objects) => load.objects.extend(objects),
            Err(e) => load.errors.push(e),
        }
    }
    Ok(load)
}
