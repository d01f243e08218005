// Command etcd is the etcd server, built from the go.etcd.io/etcd/server/v3 module that k8s.io/kubernetes pins
// (the repository's root module, which holds etcd's own main, is not what the API server is tested against).
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
