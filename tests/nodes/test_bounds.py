"""Length bounds on structured outputs: in the schema the model sees, and cut (not refused) when exceeded."""

from pydantic import BaseModel, Field

from parley.nodes.bounds import AtMost, Clipped


class Report(BaseModel):
    title: Clipped(10) = Field(description="A title.")
    points: AtMost(2, Clipped(5)) = Field(description="Points.")


def test_bounds_are_in_the_json_schema():
    schema = Report.model_json_schema()["properties"]
    assert schema["title"]["maxLength"] == 10
    assert schema["points"]["maxItems"] == 2 and schema["points"]["items"]["maxLength"] == 5


def test_over_long_answers_are_cut_not_refused():
    report = Report.model_validate({"title": "A very long title indeed", "points": ["abcdefgh", "ij", "kl"]})
    assert report == Report(title="A very lon", points=["abcde", "ij"])
