// The CNCF distribution registry with the storage drivers a loopback test registry uses (filesystem, inmemory) and
// htpasswd auth: the upstream cmd/registry main without the cloud storage drivers, whose SDKs would triple the
// build time of every fresh CI machine.
package main

import (
	"github.com/distribution/distribution/v3/registry"
	_ "github.com/distribution/distribution/v3/registry/auth/htpasswd"
	_ "github.com/distribution/distribution/v3/registry/storage/driver/filesystem"
	_ "github.com/distribution/distribution/v3/registry/storage/driver/inmemory"
)

func main() {
	// RootCmd's commands exit the process with a non-zero code themselves on failure.
	// nolint:errcheck
	registry.RootCmd.Execute()
}
