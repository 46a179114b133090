"""A provider implements ``_call`` over one :class:`ChatCall`; the base builds it."""

from __future__ import annotations

from mnemoscope.message import TextBlock, UserMsg
from mnemoscope.model import ChatCall, ChatModelBase, ChatResponse, ToolSchema

ECHO_TOOL: ToolSchema = {"name": "echo", "description": "Echo.", "input_schema": {}}


class EchoModel(ChatModelBase):
    def __init__(self, *, stream: bool = False) -> None:
        super().__init__("echo", stream=stream)
        self.calls: list[ChatCall] = []

    async def _call(self, call: ChatCall) -> ChatResponse:
        self.calls.append(call)
        return ChatResponse(content=[TextBlock(text=call.messages[-1].get_text_content())])


async def test_a_custom_model_gets_the_whole_call() -> None:
    model = EchoModel()
    response = await model([UserMsg("alice", "hi")], [ECHO_TOOL], "echo", temperature=0.5)
    assert response.text == "hi"
    [call] = model.calls
    assert [m.get_text_content() for m in call.messages] == ["hi"]
    assert call.tools == [ECHO_TOOL]
    assert call.tool_choice == "echo"
    assert call.kwargs == {"temperature": 0.5}


async def test_streaming_falls_back_to_one_call() -> None:
    model = EchoModel(stream=True)
    chunks = [c async for c in model.stream_chunks([UserMsg("alice", "hello")])]
    assert [c.kind for c in chunks] == ["text", "final"]
    assert chunks[0].delta == "hello"
    assert model.calls[0] == ChatCall(model.calls[0].messages, [], None, {})
