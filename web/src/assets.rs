//! The dashboard's static files, compiled into the binary: no CDN, nothing to deploy.
//!
//! # Caching
//! Pages link assets as `/ui/assets/<name>?v=<version>`, where the version is a hash of every
//! asset's bytes; the server may let browsers keep a versioned asset for a year, since a
//! new build changes the link.

use std::sync::OnceLock;

/// A static file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Asset {
    /// Its file name under `/ui/assets/`.
    pub name: &'static str,
    /// Its `Content-Type`.
    pub content_type: &'static str,
    /// Its bytes.
    pub body: &'static [u8],
}

/// Every asset.
pub const ASSETS: &[Asset] = &[
    Asset {
        name: "app.css",
        content_type: "text/css; charset=utf-8",
        body: include_bytes!("../static/app.css"),
    },
    Asset {
        name: "live.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("../static/live.js"),
    },
    Asset {
        name: "favicon.svg",
        content_type: "image/svg+xml",
        body: include_bytes!("../static/favicon.svg"),
    },
];

/// The asset called `name`.
#[must_use]
pub fn find(name: &str) -> Option<&'static Asset> {
    ASSETS.iter().find(|a| a.name == name)
}

/// A short hash of every asset's bytes (FNV-1a, hex), the `v` of asset links.
#[must_use]
pub fn version() -> &'static str {
    static VERSION: OnceLock<String> = OnceLock::new();
    VERSION.get_or_init(|| {
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        for asset in ASSETS {
            for byte in asset.name.bytes().chain(asset.body.iter().copied()) {
                hash ^= u64::from(byte);
                hash = hash.wrapping_mul(0x0100_0000_01b3);
            }
        }
        format!("{:012x}", hash >> 16)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_asset_is_found_by_name_and_the_version_is_stable() {
        for asset in ASSETS {
            assert_eq!(find(asset.name), Some(asset));
            assert!(!asset.body.is_empty());
        }
        assert_eq!(find("../Cargo.toml"), None);
        assert_eq!(version(), version());
        assert_eq!(version().len(), 12);
    }
}
