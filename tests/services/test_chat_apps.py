"""A chat app's own housekeeping is told from a person's question: the real default templates of Open WebUI and
LibreChat, rendered as the apps render them, and Open WebUI's `metadata.task` names; ordinary questions that mention
titles, tags or follow-ups are not; odd types never raise; a message is read only up to its bound."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from parley.core.limits import HOUSEKEEPING_SCAN_CHARS
from parley.services.chat_apps import TASKS, Housekeeping, housekeeping

ROOT = Path(__file__).resolve().parents[2]

CHAT = [{"role": "user", "content": "How do I keep basil alive indoors?"},
        {"role": "assistant", "content": "Give it six hours of sun, water when the top inch is dry, and pinch the "
                                         "flowers off."}]

# --- the templates, as each app's source has them ---------------------------------------------------------------

# Open WebUI, backend/open_webui/config.py (main, 2026): DEFAULT_TITLE_GENERATION_PROMPT_TEMPLATE.
OWUI_TITLE = """### Task:
Generate a concise title summarizing the chat history.
### Guidelines:
- The title should clearly represent the main theme or subject of the conversation.
- Keep it short: 2-4 words is best.
- Do not use emojis, quotation marks, or special formatting.
- Write the title in the chat's primary language; default to English if multilingual.
- Prioritize accuracy over creativity.
- Your entire response must consist solely of the JSON object, without any introductory or concluding text.
- The output must be a single, raw JSON object, without any markdown code fences or other encapsulating text.
- Ensure no conversational text, affirmations, or explanations precede or follow the raw JSON output, as this will cause direct parsing failure.
### Output:
JSON format: { "title": "your concise title here" }
### Examples:
- { "title": "Stock Trends" },
- { "title": "Chocolate Chip Cookies" },
- { "title": "Music Streaming" },
- { "title": "Remote Work" }
### Chat History:
<chat_history>
{{MESSAGES:END:2}}
</chat_history>"""

# Open WebUI 0.6 (PersistentConfig era), backend/open_webui/config.py: DEFAULT_TITLE_GENERATION_PROMPT_TEMPLATE.
OWUI_TITLE_0_6 = """### Task:
Generate a concise, 3-5 word title with an emoji summarizing the chat history.
### Guidelines:
- The title should clearly represent the main theme or subject of the conversation.
- Use emojis that enhance understanding of the topic, but avoid quotation marks or special formatting.
- Write the title in the chat's primary language; default to English if multilingual.
- Prioritize accuracy over excessive creativity; keep it clear and simple.
### Output:
JSON format: { "title": "your concise title here" }
### Examples:
- { "title": "📉 Stock Market Trends" },
- { "title": "🍪 Perfect Chocolate Chip Recipe" },
- { "title": "Evolution of Music Streaming" },
- { "title": "Remote Work Productivity Tips" },
- { "title": "Artificial Intelligence in Healthcare" },
- { "title": "🎮 Video Game Development Insights" }
### Chat History:
<chat_history>
{{MESSAGES:END:2}}
</chat_history>"""

# Open WebUI 0.3-0.4, backend/open_webui/config.py: DEFAULT_TITLE_GENERATION_PROMPT_TEMPLATE.
OWUI_TITLE_0_3 = """Create a concise, 3-5 word title with an emoji as a title for the chat history, in the given language. Suitable Emojis for the summary can be used to enhance understanding but avoid quotation marks or special formatting. RESPOND ONLY WITH THE TITLE TEXT.

Examples of titles:
📉 Stock Market Trends
🍪 Perfect Chocolate Chip Recipe
Evolution of Music Streaming
Remote Work Productivity Tips
Artificial Intelligence in Healthcare
🎮 Video Game Development Insights

<chat_history>
{{MESSAGES:END:2}}
</chat_history>"""

# Open WebUI, backend/open_webui/config.py (main, 2026): DEFAULT_TAGS_GENERATION_PROMPT_TEMPLATE.
OWUI_TAGS = """### Task:
Generate 1-3 broad tags categorizing the main themes of the chat history, along with 1-3 more specific subtopic tags.

### Guidelines:
- Start with high-level domains (e.g. Science, Technology, Philosophy, Arts, Politics, Business, Health, Sports, Entertainment, Education)
- Consider including relevant subfields/subdomains if they are strongly represented throughout the conversation
- If content is too short (less than 3 messages) or too diverse, use only ["General"]
- Use the chat's primary language; default to English if multilingual
- Prioritize accuracy over specificity

### Output:
JSON format: { "tags": ["tag1", "tag2", "tag3"] }

### Chat History:
<chat_history>
{{MESSAGES:END:6}}
</chat_history>"""

# Open WebUI, backend/open_webui/config.py (main, 2026): DEFAULT_IMAGE_PROMPT_GENERATION_PROMPT_TEMPLATE.
OWUI_IMAGE_PROMPT = """### Task:
Generate a detailed prompt for am image generation task based on the given language and context. Describe the image as if you were explaining it to someone who cannot see it. Include relevant details, colors, shapes, and any other important elements.

### Guidelines:
- Be descriptive and detailed, focusing on the most important aspects of the image.
- Avoid making assumptions or adding information not present in the image.
- Use the chat's primary language; default to English if multilingual.
- If the image is too complex, focus on the most prominent elements.

### Output:
Strictly return in JSON format:
{
    "prompt": "Your detailed description here."
}

### Chat History:
<chat_history>
{{MESSAGES:END:6}}
</chat_history>"""

# Open WebUI, backend/open_webui/config.py (main, 2026): DEFAULT_FOLLOW_UP_GENERATION_PROMPT_TEMPLATE.
OWUI_FOLLOW_UPS = """### Task:
Suggest 3-5 relevant follow-up questions or prompts that the user might naturally ask next in this conversation as a **user**, based on the chat history, to help continue or deepen the discussion.
### Guidelines:
- Write all follow-up questions from the user’s point of view, directed to the assistant.
- Make questions concise, clear, and directly related to the discussed topic(s).
- Only suggest follow-ups that make sense given the chat content and do not repeat what was already covered.
- If the conversation is very short or not specific, suggest more general (but relevant) follow-ups the user might ask.
- Use the conversation's primary language; default to English if multilingual.
- Response must be a JSON object with a "follow_ups" key containing an array of strings, no extra text or formatting.
### Output:
JSON format: { "follow_ups": ["Question 1?", "Question 2?", "Question 3?"] }
### Chat History:
<chat_history>
{{MESSAGES:END:6}}
</chat_history>"""

# Open WebUI, backend/open_webui/config.py (main, 2026): DEFAULT_QUERY_GENERATION_PROMPT_TEMPLATE.
OWUI_QUERIES = """### Task:
Analyze the chat history to determine the necessity of generating search queries, in the given language. By default, **prioritize generating 1-3 broad and relevant search queries** unless it is absolutely certain that no additional information is required. The aim is to retrieve comprehensive, updated, and valuable information even with minimal uncertainty. If no search is unequivocally needed, return an empty list.

### Guidelines:
- Respond **EXCLUSIVELY** with a JSON object. Any form of extra commentary, explanation, or additional text is strictly prohibited.
- When generating search queries, respond in the format: { "queries": ["query1", "query2"] }, ensuring each query is distinct, concise, and relevant to the topic.
- If and only if it is entirely certain that no useful results can be retrieved by a search, return: { "queries": [] }.
- Err on the side of suggesting search queries if there is **any chance** they might provide useful or updated information.
- Be concise and focused on composing high-quality search queries, avoiding unnecessary elaboration, commentary, or assumptions.
- Today's date is: {{CURRENT_DATE}}.
- Always prioritize providing actionable and broad queries that maximize informational coverage.

### Output:
Strictly return in JSON format: 
{
  "queries": ["query1", "query2"]
}

### Chat History:
<chat_history>
{{MESSAGES:END:6}}
</chat_history>
"""

# Open WebUI, backend/open_webui/config.py (main, 2026): DEFAULT_AUTOCOMPLETE_GENERATION_PROMPT_TEMPLATE.
OWUI_AUTOCOMPLETE = """### Task:
You are an autocompletion system. Continue the text in `<text>` based on the **completion type** in `<type>` and the given language.  

### **Instructions**:
1. Analyze `<text>` for context and meaning.  
2. Use `<type>` to guide your output:  
   - **General**: Provide a natural, concise continuation.  
   - **Search Query**: Complete as if generating a realistic search query.  
3. Start as if you are directly continuing `<text>`. Do **not** repeat, paraphrase, or respond as a model. Simply complete the text.  
4. Ensure the continuation:
   - Flows naturally from `<text>`.  
   - Avoids repetition, overexplaining, or unrelated ideas.  
5. If unsure, return: `{ "text": "" }`.  

### **Output Rules**:
- Respond only in JSON format: `{ "text": "<your_completion>" }`.

### **Examples**:
#### Example 1:  
Input:  
<type>General</type>  
<text>The sun was setting over the horizon, painting the sky</text>  
Output:  
{ "text": "with vibrant shades of orange and pink." }

#### Example 2:  
Input:  
<type>Search Query</type>  
<text>Top-rated restaurants in</text>  
Output:  
{ "text": "New York City for Italian cuisine." }  

---
### Context:
<chat_history>
{{MESSAGES:END:6}}
</chat_history>
<type>{{TYPE}}</type>  
<text>{{PROMPT}}</text>  
#### Output:
"""

# Open WebUI, backend/open_webui/config.py (main, 2026): DEFAULT_EMOJI_GENERATION_PROMPT_TEMPLATE.
OWUI_EMOJI = """Your task is to reflect the speaker's likely facial expression through a fitting emoji. Interpret emotions from the message and reflect their facial expression using fitting, diverse emojis (e.g., 😊, 😢, 😡, 😱).

Message: ```{{prompt}}```"""

# Open WebUI, backend/open_webui/config.py (main, 2026): DEFAULT_TOOLS_FUNCTION_CALLING_PROMPT_TEMPLATE.
OWUI_TOOLS = """Available Tools: {{TOOLS}}

Your task is to choose and return the correct tool(s) from the list of available tools based on the query. Follow these guidelines:

- Return only the JSON object, without any additional text or explanation.

- If no tools match the query, return an empty array: 
   {
     "tool_calls": []
   }

- If one or more tools match the query, construct a JSON response containing a "tool_calls" array with objects that include:
   - "name": The tool's name.
   - "parameters": A dictionary of required parameters and their corresponding values.

The format for the JSON response is strictly:
{
  "tool_calls": [
    {"name": "toolName1", "parameters": {"key1": "value1"}},
    {"name": "toolName2", "parameters": {"key2": "value2"}}
  ]
}"""

# Open WebUI, backend/open_webui/config.py (main, 2026): DEFAULT_MOA_GENERATION_PROMPT_TEMPLATE.
OWUI_MOA = """You have been provided with a set of responses from various models to the latest user query: "{{prompt}}"

Your task is to synthesize these responses into a single, high-quality response. It is crucial to critically evaluate the information provided in these responses, recognizing that some of it may be biased or incorrect. Your response should not simply replicate the given answers but should offer a refined, accurate, and comprehensive reply to the instruction. Ensure your response is well-structured, coherent, and adheres to the highest standards of accuracy and reliability.

Responses from models: {{responses}}"""

# Open WebUI, backend/open_webui/config.py (0.6 and later): DEFAULT_RAG_TEMPLATE, the answer to a question with files
# or a web search: a `### Task:` template that is no housekeeping.
OWUI_RAG = """### Task:
Respond to the user query using the provided context, incorporating inline citations in the format [id] **only when the <source> tag includes an explicit id attribute** (e.g., <source id="1">).

### Guidelines:
- If you don't know the answer, clearly state that.
- If uncertain, ask the user for clarification.
- Respond in the same language as the user's query.
- If the context is unreadable or of poor quality, inform the user and provide the best possible answer.
- If the answer isn't present in the context but you possess the knowledge, explain this to the user and provide the answer using your own understanding.
- **Only include inline citations using [id] (e.g., [1], [2]) when the <source> tag includes an id attribute.**
- Do not cite if the <source> tag does not contain an id attribute.
- Do not use XML tags in your response.
- Ensure citations are concise and directly related to the information provided.

### Example of Citation:
If the user asks about a specific topic and the information is found in a source with a provided id attribute, the response should include the citation like in the following example:
* "According to the study, the proposed method increases efficiency by 20% [1]."

### Output:
Provide a clear and direct response to the user's query, including inline citations in the format [id] only when the <source> tag with id attribute is present in the context.

<context>
{{CONTEXT}}
</context>
"""

# @librechat/agents, src/utils/title.ts: defaultCompletionPrompt (LibreChat's custom endpoints' default titleMethod).
LIBRECHAT_COMPLETION = """Provide a concise, 5-word-or-less title for the conversation, using title case conventions. Only return the title itself.

Conversation:
{convo}"""

# @librechat/agents, src/utils/title.ts: defaultTitlePrompt (titleMethod `structured`).
LIBRECHAT_STRUCTURED = """Analyze this conversation and provide:
1. The detected language of the conversation
2. A concise title in the detected language (5 words or less, no punctuation or quotation)

{convo}"""

# LibreChat, api/app/clients/prompts/titlePrompts.js: titleInstruction, sent by the older OpenAIClient.titleConvo as
# `Please generate ${titleInstruction}\n\n${convo}\n\n||>Title:` in a system message.
LIBRECHAT_INSTRUCTION = ('a concise, 5-word-or-less title for the conversation, using its same language, with no '
                         'punctuation. Apply title case conventions appropriate for the language. Never directly '
                         'mention the language name or the word "title"')

# LibreChat, api/app/clients/prompts/titlePrompts.js: createTitlePrompt's system message (older clients).
LIBRECHAT_CREATE_TITLE = """Write a concise title for this conversation in the given language.
Title in 5 Words or Less. No Punctuation or Quotation.
Must be in Title Case, written in the given Language.
Find an appropriate emoji to start the title.
Examples:
🌿 Sustainable Gardening Tips
🚀 Space Exploration Future Plans
🎨 Modern Art Movement Analysis
🏋️ Effective Workout Routines Explained
🍳 Quick Healthy Breakfast Ideas

{convo}"""


def open_webui(template: str, **values: str) -> str:
    """The template as Open WebUI renders it: `{{MESSAGES:END:n}}` as `ROLE: content` lines
    (utils/misc.py `get_messages_content`), then the other variables."""
    history = "\n".join(f"{m['role'].upper()}: {m['content']}" for m in CHAT)
    text = re.sub(r"\{\{MESSAGES:END:\d+\}\}", history, template).replace("{{CURRENT_DATE}}", "2026-12-07")
    for name, value in values.items():
        text = text.replace("{{" + name + "}}", value)
    return text


def librechat(template: str) -> str:
    """The template as @librechat/agents renders it: the conversation through `User: {input}\\nAI: {output}`."""
    return template.replace("{convo}", f"User: {CHAT[0]['content']}\nAI: {CHAT[1]['content']}")


def user(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


# --- the templates are told, with their task and app ------------------------------------------------------------

@pytest.mark.parametrize(("prompt", "task"), [
    (open_webui(OWUI_TITLE), "title"),
    (open_webui(OWUI_TITLE_0_6), "title"),
    (open_webui(OWUI_TITLE_0_3), "title"),
    (open_webui(OWUI_TAGS), "tags"),
    (open_webui(OWUI_FOLLOW_UPS), "follow_ups"),
    (open_webui(OWUI_QUERIES), "queries"),
    (open_webui(OWUI_AUTOCOMPLETE, TYPE="General", PROMPT="Basil also needs"), "autocomplete"),
    (open_webui(OWUI_IMAGE_PROMPT), "image_prompt"),
    (open_webui(OWUI_EMOJI, prompt="I finally got my basil to flower!"), "emoji"),
], ids=["title", "title-0.6", "title-0.3", "tags", "follow_ups", "queries", "autocomplete", "image_prompt", "emoji"])
def test_open_webui_templates_are_told_with_their_task(prompt, task):
    assert housekeeping([*CHAT, {"role": "user", "content": prompt}]) == Housekeeping(task, "prompt", "open-webui")


def test_open_webui_tool_selection_is_told_by_its_system_message():
    tools = '[{"name": "get_weather", "description": "The weather in a city", "parameters": {"city": "string"}}]'
    messages = [{"role": "system", "content": open_webui(OWUI_TOOLS, TOOLS=tools)},
                {"role": "user", "content": 'Query: History:\nUSER: """Weather in Lyon?"""\nQuery: Weather in Lyon?'}]
    assert housekeeping(messages) == Housekeeping("tool_selection", "prompt", "open-webui")


@pytest.mark.parametrize("messages", [
    user(librechat(LIBRECHAT_COMPLETION)),
    user(librechat(LIBRECHAT_STRUCTURED)),
    [{"role": "system", "content": f"Please generate {LIBRECHAT_INSTRUCTION}\n\n{librechat('{convo}')}\n\n||>Title:"}],
    [{"role": "user", "content": f"Please generate {LIBRECHAT_INSTRUCTION}\n\n{librechat('{convo}')}\n\n||>Title:"}],
    [{"role": "system", "content": librechat(LIBRECHAT_CREATE_TITLE)}, {"role": "user", "content": "Language: English"}],
], ids=["completion", "structured", "older-system", "older-user-role", "create-title-prompt"])
def test_librechat_title_prompts_are_told(messages):
    assert housekeeping(messages) == Housekeeping("title", "prompt", "librechat")


def test_a_template_in_text_parts_is_told():
    parts = [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
             {"type": "text", "text": librechat(LIBRECHAT_COMPLETION)}]
    assert housekeeping([{"role": "user", "content": parts}]) == Housekeeping("title", "prompt", "librechat")


def test_the_label_has_the_meta_shape():
    found = housekeeping(user(open_webui(OWUI_TAGS)))
    assert found.meta() == {"task": "tags", "detectedBy": "prompt", "app": "open-webui"}


# --- metadata.task ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("name", "task"), [
    ("title_generation", "title"), ("tags_generation", "tags"), ("follow_up_generation", "follow_ups"),
    ("query_generation", "queries"), ("autocomplete_generation", "autocomplete"), ("emoji_generation", "emoji"),
    ("image_prompt_generation", "image_prompt"), ("function_calling", "tool_selection"),
    (" Title_Generation ", "title"), ("notes_generation", "other"),
])
def test_open_webui_task_names_in_metadata_are_told(name, task):
    assert housekeeping(user("Hello there"), {"task": name, "chat_id": "c1"}) == Housekeeping(task, "metadata", None)


def test_metadata_takes_the_app_from_the_prompt_when_it_names_one():
    found = housekeeping(user(open_webui(OWUI_TITLE)), {"task": "tags_generation"})
    assert found == Housekeeping("tags", "metadata", "open-webui")


def test_mixture_of_agents_is_an_answer_not_housekeeping():
    prompt = open_webui(OWUI_MOA, prompt="How do I keep basil alive?", responses='"""Sun."""\n\n"""Water."""')
    assert housekeeping(user(prompt), {"task": "moa_response_generation"}) is None
    assert housekeeping(user(prompt)) is None
    # the metadata's word is final: an answer task quoting a title template is still an answer
    assert housekeeping(user(open_webui(OWUI_TITLE)), {"task": "moa_response_generation"}) is None


@pytest.mark.parametrize("name", ["summarize my contract", "generation", "_generation", "title generation",
                                  "tâche_generation", "title-generation", ""])
def test_a_free_form_task_says_nothing(name):
    """OpenAI's `metadata` holds a client's own tags: a value not in Open WebUI's form leaves the request as it is."""
    assert housekeeping(user("Review this clause for risks."), {"task": name}) is None


# --- ordinary questions are not housekeeping ---------------------------------------------------------------------

@pytest.mark.parametrize("question", [
    "What is a good title for my novel?",
    "Generate a concise title for my blog post about basil.",
    "Suggest 3-5 tags for this article: basil grows best in sun.",
    "What follow-up questions should I ask my doctor about my test results?",
    "Generate search queries I could use to research indoor herb gardens.",
    "Write an emoji for my mood today",
    "### Task: write a title for my essay on the French Revolution",
    "Summarize the chat history above in one paragraph, please.",
    "Provide a concise title for the conversation we had yesterday about taxes.",
    "Which tools should I choose to build a birdhouse? Available tools: hammer, saw.",
])
def test_ordinary_questions_are_not_housekeeping(question):
    assert housekeeping([*CHAT, {"role": "user", "content": question}]) is None
    assert housekeeping([{"role": "system", "content": "You are a helpful assistant."}, *user(question)]) is None


def test_open_webui_rag_answers_are_not_housekeeping():
    """Open WebUI's RAG template opens with `### Task:` as its housekeeping templates do, and asks for the answer."""
    context = '<source id="1">Basil wants six hours of sun.</source>'
    rag = open_webui(OWUI_RAG, CONTEXT=context)
    assert housekeeping([{"role": "system", "content": rag}, *user("How much sun does basil need?")]) is None
    assert housekeeping(user(rag + "\nHow much sun does basil need?")) is None
    # an administrator's RAG template that also quotes the chat: a task line with no housekeeping words says nothing
    quoting = rag + "\n<chat_history>\nUSER: hi\n</chat_history>"
    assert housekeeping([{"role": "system", "content": quoting}, *user("How much sun does basil need?")]) is None


def test_only_the_last_user_message_is_read():
    """A template the person pasted earlier in the conversation does not make their next question housekeeping."""
    messages = [*user(librechat(LIBRECHAT_COMPLETION)), {"role": "assistant", "content": "Basil Care Indoors"},
                *user("Thanks! Now how often should I water it?")]
    assert housekeeping(messages) is None


# --- odd types never raise ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("metadata", [
    None, [], ["title_generation"], "title_generation", 42, 3.5, True, {}, {"task": None}, {"task": 7},
    {"task": ["title_generation"]}, {"task": {"name": "title_generation"}}, {1: "title_generation"},
    {"task": "title_generation" + "x" * 100_000}, {"nested": {"task": "title_generation"}},
    {"task": "\x00title_generation"}, {"task": "\ud800"},
])
def test_odd_metadata_never_raises_and_names_no_task(metadata):
    assert housekeeping(user("How do I keep basil alive?"), metadata) is None


@pytest.mark.parametrize("messages", [
    None, "a string", 42, {"role": "user", "content": "hi"}, [None, 1, "x", []],
    [{"role": 5, "content": open_webui(OWUI_TITLE)}], [{"role": "user"}], [{"role": "user", "content": 42}],
    [{"role": "user", "content": {"text": open_webui(OWUI_TITLE)}}],
    [{"role": "user", "content": [None, 3, {"type": "text", "text": 5}, {"type": "text"}, {"text": "### Task:"}]}],
    [{"role": "system", "content": None}, {"role": "user", "content": [{"type": "text", "text": None}]}],
])
def test_odd_messages_never_raise(messages):
    assert housekeeping(messages) is None
    assert housekeeping(messages, {"task": "title_generation"}) == Housekeeping("title", "metadata", None)


# --- the bound ---------------------------------------------------------------------------------------------------

class WholeTextRead(str):
    """A message that fails the test if anything but its first characters is searched or lowered."""

    def lower(self):
        raise AssertionError("the whole message was lowered")

    def find(self, *args):
        raise AssertionError("the whole message was searched")

    def __contains__(self, item):
        raise AssertionError("the whole message was searched")


def test_a_huge_message_is_read_only_up_to_the_bound():
    prompt = librechat(LIBRECHAT_COMPLETION)
    huge = WholeTextRead(prompt + "x" * (4 * 1024 * 1024))
    assert housekeeping(user(huge)) == Housekeeping("title", "prompt", "librechat")


def test_marks_past_the_bound_are_not_seen():
    prompt = librechat(LIBRECHAT_COMPLETION)
    mark = prompt.index("Only return the title itself")
    within = " " * (HOUSEKEEPING_SCAN_CHARS - mark - len("Only return the title itself")) + prompt
    past = " " + within
    assert housekeeping(user(within)) == Housekeeping("title", "prompt", "librechat")
    assert housekeeping(user(past)) is None
    # in text parts, the bound is on their text together
    assert housekeeping([{"role": "user", "content": [{"type": "text", "text": " " * HOUSEKEEPING_SCAN_CHARS},
                                                      {"type": "text", "text": prompt}]}]) is None


def test_every_task_is_documented():
    page = (ROOT / "docs" / "chat-apps.md").read_text(encoding="utf-8")
    assert [task for task in TASKS if f"`{task}`" not in page] == []
