"""One decode step of the selective scan: ``ssmscan.selective_state_update``."""
