//! Images out of husk and out of sandboxes: `husk image export`, `husk
//! push`, `husk commit`, `husk fork`.

use clap::{Args, ValueEnum};

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExportFormat {
    /// An OCI image layout directory.
    Oci,
    /// A tar of an OCI image layout (skopeo's oci-archive).
    OciArchive,
    /// A `docker save` tarball, for `docker load`.
    DockerArchive,
}

/// `husk image export NAME -o PATH --format F`.
#[derive(Args, Debug)]
pub struct ImageExportArgs {
    /// NAME[:TAG] of a stored image.
    pub name: String,
    /// Where to write it (an archive is replaced; a directory must be new or empty).
    #[arg(long, short = 'o', value_name = "PATH")]
    pub output: std::path::PathBuf,
    /// What to write: oci (a layout directory), oci-archive, docker-archive.
    #[arg(long, value_enum, default_value = "oci-archive")]
    pub format: ExportFormat,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

/// `husk push NAME [REF]`.
#[derive(Args, Debug)]
pub struct PushArgs {
    /// NAME[:TAG] of a stored image.
    pub name: String,
    /// Where to push it: REGISTRY[:PORT]/REPO[:TAG] (default: NAME, when it
    /// is such a reference).
    pub reference: Option<String>,
    /// Allow plain HTTP to this registry, HOST:PORT (repeatable;
    /// loopback registries never need it).
    #[arg(long, value_name = "HOST:PORT", env = "HUSK_INSECURE_REGISTRY", value_delimiter = ',')]
    pub insecure_registry: Vec<String>,
    /// Extra root CA certificates for the registry (PEM file; repeatable).
    #[arg(long, value_name = "FILE", env = "HUSK_REGISTRY_CA", value_delimiter = ',')]
    pub registry_ca: Vec<std::path::PathBuf>,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

/// `husk commit SANDBOX NAME[:TAG]`.
#[derive(Args, Debug)]
pub struct CommitArgs {
    /// The live sandbox (id or name).
    pub sandbox: String,
    /// Name of the new image.
    pub name: String,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

/// `husk fork SANDBOX [--count N]`.
#[derive(Args, Debug)]
pub struct ForkArgs {
    /// The live sandbox (id or name).
    pub sandbox: String,
    /// How many sandboxes to start from the one snapshot.
    #[arg(long, short = 'n', default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub count: u32,
    /// Lease of each fork (default: the source's).
    #[arg(long, value_name = "DURATION", value_parser = super::lease)]
    pub ttl: Option<std::time::Duration>,
    /// A label KEY=VALUE for every fork (repeatable); the source's labels
    /// are not copied.
    #[arg(long, value_name = "KEY=VALUE")]
    pub label: Vec<String>,
    /// Print the snapshot and the forks' records as JSON.
    #[arg(long)]
    pub json: bool,
    /// Fork its running processes with their memory too (gVisor sandboxes,
    /// `--runtime runsc`: one checkpoint, restored in every fork).
    #[arg(long)]
    pub memory: bool,
}

/// `husk image rm NAME...`: several at once, as `docker rmi` takes them.
#[derive(Args, Debug)]
pub struct ImageRmArgs {
    /// NAME[:TAG] of each image to remove (`:latest` when omitted).
    #[arg(required = true, value_name = "NAME")]
    pub names: Vec<String>,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}
