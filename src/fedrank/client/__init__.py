"""The client side: the SDK an application embeds (:mod:`fedrank.client.sdk`) and the
on-device update of a real Firefox profile (:mod:`fedrank.client.frecency_update`)."""

from fedrank.client.sdk import Client, ClientError, SendResult, ServedModel

__all__ = ["Client", "ClientError", "SendResult", "ServedModel"]
