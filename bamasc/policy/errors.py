"""What goes wrong in the policy stage, as one exception the commands report."""


class PolicyError(Exception):
    """A checkpoint that cannot be used: missing, damaged, or made for another system or embedding."""
