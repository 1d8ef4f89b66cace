// Package version holds torchspeed's own version, set at link time by the Makefile.
package version

// Version is torchspeed's version ("dev" for builds outside the Makefile).
var Version = "dev"

// ManifestFormat is the version of the artifact manifest this build writes and reads. Loading an
// artifact with a newer format fails with a clear message. Format 2 manifests that record a
// digest of the records also record their own (manifest_sha256) and one per record.
const ManifestFormat = 2
