/*
 * Licensed under the Apache License, Version 2.0 (the "License"); you may not use this file except in
 * compliance with the License. You may obtain a copy of the License at
 * http://www.apache.org/licenses/LICENSE-2.0
 */
package io.lakewarden.iceberg;

import com.amazonaws.auth.AWSCredentials;
import com.amazonaws.auth.AWSCredentialsProvider;
import com.amazonaws.auth.BasicSessionCredentials;
import java.io.IOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;
import java.util.Map;
import org.apache.hadoop.conf.Configuration;
import org.apache.iceberg.rest.credentials.Credential;
import org.apache.iceberg.rest.responses.LoadCredentialsResponse;
import org.apache.iceberg.rest.responses.LoadCredentialsResponseParser;

/**
 * S3A's credentials for one table's prefix, as a REST catalog vended them, renewed before they expire by asking
 * the catalog's refresh endpoint (`client.refresh-credentials-endpoint`) again, as Iceberg's S3FileIO does: a
 * rewrite or an expiry that runs longer than the credentials last keeps its access. StorageFileIO sets its
 * configuration: the keys S3A reads (fs.s3a.access.key, .secret.key, .session.token) and, under
 * fs.s3a.lakewarden., when they expire, where to renew them, with which bearer token, for which prefix.
 */
public class VendedCredentialsProvider implements AWSCredentialsProvider {
  private static final long RENEW_BEFORE_MS = 5 * 60 * 1000L;
  private static final HttpClient HTTP =
      HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(10)).build();

  private final String refreshUrl;
  private final String token;
  private final String prefix;
  private String accessKey;
  private String secretKey;
  private String sessionToken;
  private long expiresAtMs;

  public VendedCredentialsProvider(URI bucket, Configuration conf) {
    this.accessKey = conf.getTrimmed("fs.s3a.access.key");
    this.secretKey = conf.getTrimmed("fs.s3a.secret.key");
    this.sessionToken = conf.getTrimmed("fs.s3a.session.token");
    this.expiresAtMs = parse(conf.getTrimmed(StorageFileIO.PREFIX + "expires-at-ms"));
    this.refreshUrl = conf.getTrimmed(StorageFileIO.PREFIX + "refresh-url");
    this.token = conf.getTrimmed(StorageFileIO.PREFIX + "refresh-token");
    this.prefix = conf.getTrimmed(StorageFileIO.PREFIX + "prefix");
  }

  private static long parse(String millis) {
    return millis == null || millis.isEmpty() ? Long.MAX_VALUE : Long.parseLong(millis);
  }

  @Override
  public synchronized AWSCredentials getCredentials() {
    if (refreshUrl != null && System.currentTimeMillis() > expiresAtMs - RENEW_BEFORE_MS) {
      refresh();
    }
    return new BasicSessionCredentials(accessKey, secretKey, sessionToken);
  }

  @Override
  public synchronized void refresh() {
    if (refreshUrl == null) {
      return;
    }
    HttpRequest request =
        HttpRequest.newBuilder(URI.create(refreshUrl))
            .timeout(Duration.ofSeconds(30))
            .header("Authorization", "Bearer " + token)
            .header("Accept", "application/json")
            .GET()
            .build();
    HttpResponse<String> answer;
    try {
      answer = HTTP.send(request, HttpResponse.BodyHandlers.ofString());
    } catch (IOException e) {
      throw new IllegalStateException("cannot renew the storage credentials of " + prefix + ": " + e, e);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new IllegalStateException("interrupted while renewing the storage credentials of " + prefix, e);
    }
    if (answer.statusCode() != 200) {
      throw new IllegalStateException(
          "the catalog refused to renew the storage credentials of "
              + prefix
              + " ("
              + answer.statusCode()
              + "): "
              + answer.body());
    }
    LoadCredentialsResponse loaded = LoadCredentialsResponseParser.fromJson(answer.body());
    Credential best = null;
    for (Credential credential : loaded.credentials()) {
      String candidate = StorageFileIO.normalized(credential.prefix());
      if (StorageFileIO.normalized(prefix).startsWith(candidate)
          && (best == null || candidate.length() > StorageFileIO.normalized(best.prefix()).length())) {
        best = credential;
      }
    }
    if (best == null) {
      throw new IllegalStateException("the catalog renewed no storage credentials for " + prefix);
    }
    Map<String, String> config = best.config();
    this.accessKey = config.get("s3.access-key-id");
    this.secretKey = config.get("s3.secret-access-key");
    this.sessionToken = config.get("s3.session-token");
    this.expiresAtMs = parse(config.get("s3.session-token-expires-at-ms"));
  }
}
