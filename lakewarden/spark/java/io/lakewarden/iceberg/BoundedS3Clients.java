/*
 * Licensed under the Apache License, Version 2.0 (the "License"); you may not use this file except in
 * compliance with the License. You may obtain a copy of the License at
 * http://www.apache.org/licenses/LICENSE-2.0
 */
package io.lakewarden.iceberg;

import java.time.Duration;
import java.util.Map;
import org.apache.iceberg.aws.AwsClientFactories;
import org.apache.iceberg.aws.AwsClientFactory;
import org.apache.iceberg.aws.AwsClientProperties;
import org.apache.iceberg.aws.HttpClientProperties;
import org.apache.iceberg.aws.s3.S3FileIOProperties;
import org.apache.iceberg.util.PropertyUtil;
import software.amazon.awssdk.core.client.config.ClientOverrideConfiguration;
import software.amazon.awssdk.core.retry.RetryPolicy;
import software.amazon.awssdk.core.retry.backoff.EqualJitterBackoffStrategy;
import software.amazon.awssdk.services.dynamodb.DynamoDbClient;
import software.amazon.awssdk.services.glue.GlueClient;
import software.amazon.awssdk.services.kms.KmsClient;
import software.amazon.awssdk.services.s3.S3AsyncClient;
import software.amazon.awssdk.services.s3.S3Client;
import software.amazon.awssdk.services.s3.S3ClientBuilder;

/**
 * The S3 clients of StorageFileIO's S3FileIO (`client.factory`): Iceberg's own, built as its default factory builds
 * them, with one difference. Iceberg backs off from throttling (503 SlowDown) with `s3.retry.min-wait-ms` ..
 * `s3.retry.max-wait-ms`, but from every other retryable failure (500 InternalError, a connection reset, a socket
 * that stayed silent) with the SDK's default of 100 ms doubling under full jitter: its retries of a store that fails
 * for a few seconds are spent within about one. Here both back off alike, so that a store that fails for a moment
 * is waited for, and the waits stay within the bounds spark/session.py derives from the catalog's storage timeout.
 * The other clients (Glue, KMS, DynamoDB) are Iceberg's default factory's.
 */
public class BoundedS3Clients implements AwsClientFactory {
  private AwsClientFactory others;
  private AwsClientProperties awsClientProperties;
  private HttpClientProperties httpClientProperties;
  private S3FileIOProperties s3FileIOProperties;
  private long minWaitMs;
  private long maxWaitMs;

  @Override
  public void initialize(Map<String, String> properties) {
    this.others = AwsClientFactories.defaultFactory();
    others.initialize(properties);
    this.awsClientProperties = new AwsClientProperties(properties);
    this.httpClientProperties = new HttpClientProperties(properties);
    this.s3FileIOProperties = new S3FileIOProperties(properties);
    this.minWaitMs =
        PropertyUtil.propertyAsLong(
            properties, S3FileIOProperties.S3_RETRY_MIN_WAIT_MS, S3FileIOProperties.S3_RETRY_MIN_WAIT_MS_DEFAULT);
    this.maxWaitMs =
        PropertyUtil.propertyAsLong(
            properties, S3FileIOProperties.S3_RETRY_MAX_WAIT_MS, S3FileIOProperties.S3_RETRY_MAX_WAIT_MS_DEFAULT);
  }

  @Override
  public S3Client s3() {
    return S3Client.builder()
        .applyMutation(awsClientProperties::applyClientRegionConfiguration)
        .applyMutation(awsClientProperties::applyLegacyMd5Plugin)
        .applyMutation(httpClientProperties::applyHttpClientConfigurations)
        .applyMutation(s3FileIOProperties::applyEndpointConfigurations)
        .applyMutation(s3FileIOProperties::applyServiceConfigurations)
        .applyMutation(b -> s3FileIOProperties.applyCredentialConfigurations(awsClientProperties, b))
        .applyMutation(s3FileIOProperties::applySignerConfiguration)
        .applyMutation(s3FileIOProperties::applyS3AccessGrantsConfigurations)
        .applyMutation(s3FileIOProperties::applyUserAgentConfigurations)
        .applyMutation(s3FileIOProperties::applyRetryConfigurations)
        .applyMutation(this::backOffAlike)
        .build();
  }

  /** Iceberg's retry policy (its attempts, conditions and token bucket) with its throttling back-off for all. */
  private void backOffAlike(S3ClientBuilder builder) {
    ClientOverrideConfiguration configured = builder.overrideConfiguration();
    RetryPolicy policy = configured.retryPolicy().orElseThrow();
    EqualJitterBackoffStrategy backoff =
        EqualJitterBackoffStrategy.builder()
            .baseDelay(Duration.ofMillis(minWaitMs))
            .maxBackoffTime(Duration.ofMillis(maxWaitMs))
            .build();
    builder.overrideConfiguration(
        configured.toBuilder().retryPolicy(policy.toBuilder().backoffStrategy(backoff).build()).build());
  }

  @Override
  public S3AsyncClient s3Async() {
    return others.s3Async();
  }

  @Override
  public GlueClient glue() {
    return others.glue();
  }

  @Override
  public KmsClient kms() {
    return others.kms();
  }

  @Override
  public DynamoDbClient dynamo() {
    return others.dynamo();
  }
}
