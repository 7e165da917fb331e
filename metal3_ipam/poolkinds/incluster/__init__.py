"""The Cluster API in-cluster provider's four pool kinds (``ipam.cluster.x-k8s.io``): IP pools and prefix
pools, namespaced and global; their spec, rules, conversion between served versions and locks."""
