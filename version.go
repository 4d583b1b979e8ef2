package lockraft

// Version is this release of lockraft (semantic versioning; see
// CHANGELOG.md). The lead tags the repository with "v" + Version.
const Version = "0.3.0"
