"""The Python tool of support_tools.bam: a small order book that `lookup_order` reads.

A run that uses the tool imports this module, with the folder of the .bam file
first on the import path, and calls the function in the bamasc process: it is
your own code, with the rights of that process. `bamasc lint` and `bamasc
compile` never import it.
"""

from __future__ import annotations

ORDERS = {
    "A1001": {"items": ["USB-C charger"], "status": "delivered on 3 March", "payments": [19.90]},
    "A1002": {"items": ["Desk lamp", "Bulb (2 pack)"], "status": "shipped on 6 March", "payments": [34.50, 34.50]},
    "A1003": {"items": ["Keyboard"], "status": "being packed", "payments": [49.00]},
}


def lookup_order(order_id: str) -> str:
    """Look up an order by its id: its items, its status and the payments taken for it."""
    order = ORDERS.get(order_id.strip().upper())
    if order is None:
        return f"There is no order {order_id!r}. Order ids look like A1001."
    payments = ", ".join(f"${amount:.2f}" for amount in order["payments"])
    return f"Order {order_id.upper()}: {', '.join(order['items'])}; {order['status']}; payments taken: {payments}."
