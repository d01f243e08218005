"""The step tuner's loop per object and everything it does over the network: pod discovery, the HTTP client toward
pods and Prometheus, actuation, the tuner's status and Events. The decision itself is the pure ``tuner`` package."""
