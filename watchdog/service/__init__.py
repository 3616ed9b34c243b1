"""Running as a service: the scheduler loop, signals, systemd notification, the
Prometheus endpoint, continuous recording and ``watchdog status`` rendering."""
