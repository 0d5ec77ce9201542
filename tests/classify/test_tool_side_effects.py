"""Which declared tools commit side effects: verb-first tool names, read verbs before nouns.

A tool named `lookup_order` reads an order; `order_pizza` orders one. The tables hold written
names in snake, camel and Pascal case, and real tool names of the project's prompt data (the
BFCL function-calling rows of `/work/shared/data/prompts/`, see its README); one test checks
that those names are in the data, and skips where the data is not on the machine.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from router.classify.tools import name_verbs, side_effect_tools, tool_is_consequential

SHARED_PROMPTS = Path("/work/shared/data/prompts")

READS = [
    "lookup_order",
    "lookUpOrder",
    "LookupOrder",
    "look_up_order",
    "get_order",
    "getOrder",
    "GetOrder",
    "check_payment_status",
    "checkPaymentStatus",
    "list_transfers",
    "ListTransfers",
    "search_bookings",
    "find_reservation",
    "findReservation",
    "fetch_invoice",
    "FetchInvoice",
    "read_email",
    "readEmail",
    "view_booking",
    "describe_refund",
    "count_orders",
    "retrieve_payment",
    "inspect_order",
    "preview_email",
    "estimate_shipping_for_order",
    "quote_trade",
    "validate_payment",
    "verify_transfer",
    "query_orders",
    "show_cart_checkout_total",
    "get_or_find_order",
]
WRITES = [
    "send_email",
    "sendEmail",
    "SendEmail",
    "create_order",
    "createOrder",
    "order_pizza",
    "orderPizza",
    "transfer_funds",
    "TransferFunds",
    "book_flight",
    "bookFlight",
    "cancel_subscription",
    "delete_file",
    "DeleteFile",
    "pay_invoice",
    "refund_order",
    "update_address_and_email",
    "place_order",
    "submitOrder",
    "executeTrade",
    "ExecuteTrade",
    "validate_and_submit",
    "checkAndPayInvoice",
    "search_then_book_flight",
    "get_or_delete_file",
    "check_out_cart",
]
# Real names from the data: (name, commits).
REAL_TOOLS = [
    ("Hotels_2_SearchHouse", False),
    ("Flights_4_SearchOnewayFlight", False),
    ("Restaurants_2_FindRestaurants", False),
    ("Music_3_LookupMusic", False),
    ("Alarm_1_GetAlarms", False),
    ("library.search_book", False),
    ("lawsuit_details.find", False),
    ("flight.status.check", False),
    ("ride_hailing.get_rides", False),
    ("art_auction.fetch_artwork_price", False),
    ("acl_api.AclApi.retrieve_projects", False),
    ("OpenWeatherMap.get_current_weather", False),
    ("user_authentication.validate", False),
    ("finance.calculate_future_value", False),
    ("list_files", False),
    ("Hotels_2_BookHouse", True),
    ("Hotels_4_ReserveHotel", True),
    ("Buses_3_BuyBusTicket", True),
    ("Payment_1_MakePayment", True),
    ("Payment_1_RequestPayment", True),
    ("Services_1_BookAppointment", True),
    ("library.reserve_book", True),
    ("grocery_delivery.order", True),
    ("uber.eat.order", True),
    ("bank_account.transfer", True),
    ("investment.withdraw", True),
    ("walmart.purchase", True),
    ("releases_api.ReleasesApi.post_release", True),
    ("releases_api.ReleasesApi.delete_release", True),
    ("ControlAppliance.execute", True),
    ("send_message", True),
    ("todo_delete", True),
]


@pytest.mark.parametrize("name", READS)
def test_a_name_that_opens_with_a_read_verb_reads_whatever_nouns_follow(name: str) -> None:
    """`lookup_order`, `getOrder`, `FetchInvoice`: the read verb decides, not `order`."""
    assert not tool_is_consequential(name)
    assert not tool_is_consequential(name, "Look up an order's status by id")


@pytest.mark.parametrize("name", WRITES)
def test_a_name_that_opens_with_or_joins_a_committing_verb_commits(name: str) -> None:
    """Consequential verbs still commit, first or after `and`/`then`/`or`."""
    assert tool_is_consequential(name)


@pytest.mark.parametrize(("name", "commits"), REAL_TOOLS)
def test_real_tool_names_of_the_prompt_data(name: str, commits: bool) -> None:
    """Namespaces (`library.`, `Hotels_2_`) are skipped: the action's own verb decides."""
    assert tool_is_consequential(name) is commits


def test_the_real_tool_names_are_in_the_prompt_data() -> None:
    """The table above holds names the data really declares."""
    if not SHARED_PROMPTS.exists():
        pytest.skip("the shared prompt data is not on this machine")
    declared: set[str] = set()
    for split in ("train.jsonl", "test.jsonl"):
        with (SHARED_PROMPTS / split).open(encoding="utf-8") as rows:  # not `splitlines`:
            for line in rows:  # a text may hold U+2028, which it would split at
                declared.update(json.loads(line).get("tools") or [])
    assert {name for name, _ in REAL_TOOLS} <= declared


def test_a_description_that_opens_with_a_committing_verb_overrules_a_read_name() -> None:
    """BFCL's `Trains_1_GetTrainTickets` buys tickets: its description says so first."""
    reserves = "Reserves tickets for a train journey between specified cities."
    assert tool_is_consequential("Trains_1_GetTrainTickets", reserves)
    assert not tool_is_consequential("Trains_1_GetTrainTickets", "Finds train tickets.")
    assert not tool_is_consequential("lookup_order", "Look up an order's status by id")


def test_name_verbs_are_the_clause_leads_of_the_action_part() -> None:
    """One verb per clause of the last namespace segment; `check in` is not `check`."""
    assert name_verbs("validate_and_submit") == ("validate", "submit")
    assert name_verbs("acl_api.AclApi.retrieve_projects") == ("retrieve",)
    assert name_verbs("Hotels_2_SearchHouse") == ("search",)
    assert name_verbs("check_in_guest") == ("checkin",)
    assert name_verbs("") == ()


def test_side_effect_tools_lists_only_the_committing_tools_of_a_mixed_request() -> None:
    """A read tool beside a write tool: only the write tool is a side effect."""
    names = ["lookup_order", "refund_order", "search_bookings", "cancel_booking"]
    assert side_effect_tools(names, [""] * 4) == ("refund_order", "cancel_booking")


# Server namespaces as MCP gateways and tool routers write them; read whole, the server's name
# was taken for the verb, and a read tool with `order`, `invoice`, `payment` or `post` among its
# nouns was side-effecting (the classifier audit of 2026-12-07: 7 of 157 read-only names).
NAMESPACED = ["mcp__shop__{}", "shop__{}", "shop-{}", "mcp-shop-{}"]


@pytest.mark.parametrize("namespace", NAMESPACED)
@pytest.mark.parametrize(
    ("action", "commits"),
    [
        ("get_order_status", False),
        ("check_payment_status", False),
        ("FetchInvoice", False),
        ("get_post", False),
        ("send_email", True),
        ("refundOrder", True),
    ],
)
def test_a_server_namespace_does_not_hide_the_action_s_verb(
    namespace: str, action: str, commits: bool
) -> None:
    assert tool_is_consequential(namespace.format(action)) is commits


def test_a_kebab_case_name_is_one_action_not_a_namespace() -> None:
    """`-` before a plain word joins the words of one name: `get-order-status` reads."""
    assert name_verbs("get-order-status") == ("get",)
    assert not tool_is_consequential("get-order-status")
    assert tool_is_consequential("delete-user")
