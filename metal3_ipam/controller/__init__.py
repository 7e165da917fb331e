"""The controller: kopf watches feeding the inventory, pool workers running the shared reconcile."""
