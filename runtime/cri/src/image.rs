//! ImageService calls: what is on the node, pulling, removing, filesystem usage.

use crate::client::request;
use crate::v1::{
    AuthConfig, Image, ImageFilter, ImageFsInfoRequest, ImageFsInfoResponse, ImageSpec,
    ImageStatusRequest, ListImagesRequest, PodSandboxConfig, PullImageRequest, RemoveImageRequest,
};
use crate::{Cri, CriError};

/// An ImageSpec naming `image` (a name such as `busybox:1`, a digest reference or an ID).
fn spec(image: &str) -> Option<ImageSpec> {
    Some(ImageSpec {
        image: image.to_owned(),
        ..ImageSpec::default()
    })
}

impl Cri {
    /// The images on the node matching `filter` (all with `None`).
    pub async fn list_images(&self, filter: Option<ImageFilter>) -> Result<Vec<Image>, CriError> {
        let answer = self
            .image()
            .list_images(request(
                ListImagesRequest { filter },
                Some(self.options().query_timeout),
            ))
            .await
            .map_err(|status| CriError::from_status("ListImages", status))?;
        Ok(answer.into_inner().images)
    }

    /// The image `image` names, or `None` when it is not on the node: CRI answers a missing
    /// image with an empty status, not an error, and edged pulls on `None`.
    pub async fn image_status(&self, image: &str) -> Result<Option<Image>, CriError> {
        let message = ImageStatusRequest {
            image: spec(image),
            verbose: false,
        };
        let answer = self
            .image()
            .image_status(request(message, Some(self.options().query_timeout)))
            .await
            .map_err(|status| CriError::from_status("ImageStatus", status))?;
        Ok(answer.into_inner().image)
    }

    /// Pulls `image`, with registry credentials when the pod has imagePullSecrets, and
    /// returns the runtime's reference to it (an ID or digest reference). `sandbox_config` is
    /// the pod's, when the pull is for a pod (runtimes may pull in its context).
    pub async fn pull_image(
        &self,
        image: &str,
        auth: Option<AuthConfig>,
        sandbox_config: Option<PodSandboxConfig>,
    ) -> Result<String, CriError> {
        let message = PullImageRequest {
            image: spec(image),
            auth,
            sandbox_config,
        };
        let answer = self
            .image()
            .pull_image(request(message, Some(self.options().pull_timeout)))
            .await
            .map_err(|status| CriError::from_status("PullImage", status))?;
        Ok(answer.into_inner().image_ref)
    }

    /// Removes an image. Succeeds for one already gone.
    pub async fn remove_image(&self, image: &str) -> Result<(), CriError> {
        let message = RemoveImageRequest { image: spec(image) };
        self.image()
            .remove_image(request(message, Some(self.options().call_timeout)))
            .await
            .map_err(|status| CriError::from_status("RemoveImage", status))?;
        Ok(())
    }

    /// Usage of the filesystem images are stored on: what image garbage collection and the
    /// node's `imagefs` eviction signals are computed from.
    pub async fn image_fs_info(&self) -> Result<ImageFsInfoResponse, CriError> {
        let answer = self
            .image()
            .image_fs_info(request(
                ImageFsInfoRequest {},
                Some(self.options().query_timeout),
            ))
            .await
            .map_err(|status| CriError::from_status("ImageFsInfo", status))?;
        Ok(answer.into_inner())
    }
}
