"""The first-order linear recurrence op h_t = a_t * h_{t-1} + b_t."""
