"""The controller: watches feeding the inventory, pool workers running the shared reconcile."""
