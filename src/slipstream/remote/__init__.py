"""Object storage: ``open`` (``ss.open`` for files, lists, sharded folders and URLs), ``store`` (the
clients), ``cache`` (the node's bounded disk cache), ``fetch`` (checked ranges, read-ahead),
``retry`` (backoff within a budget) and ``pages`` (a remote packed file as a page source)."""
