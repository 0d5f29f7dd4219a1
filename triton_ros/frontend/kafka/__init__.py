"""The Kafka message-stream frontend: KServe v2 inference requests consumed from Kafka topics,
answered on a reply topic (``kafka_server``), a sink that mirrors results to a topic
(``result_sink``), their options (``options``) and the message conventions (``messages``).
confluent-kafka is imported only when one of them runs. See docs/kafka.md.
"""
