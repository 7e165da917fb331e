"""The pure IPAM core: address sets, pools, allocation, naming, validation, reconcile. No I/O."""
