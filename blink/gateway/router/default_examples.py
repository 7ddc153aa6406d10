"""Built-in example prompts for the default classifier's labels: simple, medium, complex.

simple: chit-chat, lookups, one-line rewrites (a ~1B model answers them; the real 135M SmolLM2
misses most of the arithmetic and common-sense ones: benchmarks/router_calibration.py);
medium: explanations, summaries, short code (a 7-8B model); complex: multi-step reasoning,
design, long proofs and programs (a frontier model). Override them per route in the config.
"""

from __future__ import annotations

DEFAULT_EXAMPLES: dict[str, list[str]] = {
    "simple": [
        "hi there!",
        "hello, how are you?",
        "thanks, that's all",
        "good morning",
        "what is the capital of France?",
        "what time zone is Tokyo in?",
        "translate 'thank you' into Spanish",
        "how do you spell necessary?",
        "what's 12 times 7?",
        "give me a synonym for happy",
        "who wrote Romeo and Juliet?",
        "convert 5 miles to kilometers",
        "tell me a short joke",
        "what day comes after Tuesday?",
        "fix the typo: 'I recieved the pacakge'",
        "is a tomato a fruit?",
    ],
    "medium": [
        "explain how a hash table works",
        "summarize the main causes of the French Revolution in a paragraph",
        "write a Python function that reverses a linked list",
        "what are the pros and cons of remote work?",
        "explain the difference between TCP and UDP",
        "write a polite email asking my landlord to fix the heating",
        "how does photosynthesis work?",
        "compare SQL and NoSQL databases for a small web app",
        "explain what a closure is in JavaScript with an example",
        "give me a 3-day itinerary for Rome",
        "what is the difference between a virus and a bacterium?",
        "write a bash script that renames all .txt files to .md",
        "explain gradient descent in simple terms",
        "summarize this article about climate policy in five bullet points",
        "how do I center a div in CSS?",
        "describe the water cycle for a 10-year-old",
    ],
    "complex": [
        "prove that there are infinitely many prime numbers and then generalise the argument to primes of the form 4k+3",
        "design a distributed rate limiter for a global API with strong consistency guarantees and analyse its failure modes",
        "write a lock-free concurrent queue in C++ and argue its correctness under the C++ memory model",
        "derive the backpropagation equations for a transformer layer including layer norm and attention",
        "plan a migration of a monolithic banking system to microservices with zero downtime, step by step with risks",
        "analyse the time and space complexity of this dynamic programming solution and propose a faster algorithm",
        "compare three approaches to consensus (Paxos, Raft, PBFT) for a geo-replicated database and recommend one",
        "write a compiler front end for a small language with a lexer, a recursive descent parser and type checking",
        "solve this multi-step physics problem: a charged particle moves through crossed electric and magnetic fields",
        "critically evaluate the methodology of a randomized controlled trial with attrition bias and propose corrections",
        "design the database schema, API and caching strategy for a ride-sharing app at ten million users",
        "find the bug in this 200-line concurrent Go program with a race between goroutines and explain the fix",
        "draft a legal analysis of liability when an autonomous vehicle causes an accident across two jurisdictions",
        "optimise this CUDA kernel for memory coalescing and explain the roofline analysis",
        "formalise and prove the correctness of a binary search variant with loop invariants",
        "build a financial model for a startup with three revenue streams, churn and a five-year cash flow forecast",
    ],
}
