//! `husk build`: a Dockerfile into an image in the store, without Docker.
//!
//! ```text
//! dockerfile    the parser (directives, continuations, instructions)
//! words         splitting and $VAR expansion
//! ignore        .dockerignore
//! stages        the build: stages and instructions in order
//! run           a RUN step in a sandbox whose upper directory is kept
//! diff          that upper as a layer tar (whiteouts, opaque dirs, ids)
//! copy, add     COPY / ADD from the context or an earlier stage
//! layer_tar     copy::tarw at one fixed mtime (same tree, same bytes);
//! layer         its tars published through Store::ensure_layer
//! config        the image config, manifest and history
//! export        a stored image as OCI blobs again (export, push)
//! push          those blobs and the manifest to a registry
//! snapshot      a live sandbox's changes against its image, as a layer
//! commit        that layer as a new image (husk commit)
//! cache         RUN step keys -> layers
//! ```

pub mod add;
pub mod cache;
pub mod commit;
pub mod config;
pub mod copy;
pub mod diff;
pub mod dockerfile;
pub mod export;
pub mod fork;
pub mod ignore;
pub mod layer;
pub mod layer_tar;
pub mod push;
pub mod run;
pub mod snapshot;
pub mod stages;
pub mod words;
