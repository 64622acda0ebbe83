import Foundation
import Testing
@testable import SignetCore
@testable import SignetCrypto
import SignetTestSupport
import SignetCryptoTestSupport

/// Project Wycheproof's RSA vectors (Tests/SignetTestSupport/Vectors/wycheproof, Apache-2.0).
@Suite("Wycheproof RSA vectors")
struct WycheproofTests {
    struct File: Decodable {
        let algorithm: String
        let numberOfTests: Int
        let testGroups: [Group]
    }

    struct Group: Decodable {
        let sha: String
        let keySize: Int
        let publicKeyDer: String?
        let publicKeyPem: String?
        let keyDer: String?
        let keyPem: String?
        let privateKeyPkcs8: String?
        let privateKeyPem: String?
        let mgfSha: String?
        let sLen: Int?
        let tests: [Case]
    }

    struct Case: Decodable {
        let tcId: Int
        let comment: String
        let msg: String
        let sig: String
        let result: String
        let flags: [String]
    }

    static func load(_ name: String) throws -> File {
        try JSONDecoder().decode(File.self, from: contents(Fixtures.vectors + "/" + name))
    }

    /// Signet's algorithm for a group, or nil when Signet does not implement that scheme.
    static func algorithm(_ file: File, _ group: Group) -> SignatureAlgorithm? {
        if file.algorithm == "RSASSA-PSS" {
            guard group.sha == "SHA-256", group.mgfSha == "SHA-256", group.sLen == 32 else { return nil }
            return .rsaPSSSHA256
        }
        switch group.sha {
        case "SHA-256": return .rsaPKCS1v15SHA256
        case "SHA-384": return .rsaPKCS1v15SHA384
        case "SHA-512": return .rsaPKCS1v15SHA512
        default: return nil
        }
    }

    /// Both encodings of the group's public key.
    static func publicKeys(_ group: Group) throws -> [PublicKey] {
        let der = group.publicKeyDer ?? group.keyDer!
        let pem = group.publicKeyPem ?? group.keyPem!
        return [
            try PublicKey(bytes: bytes(hex: der), name: "publicKeyDer", allowWeakKey: true),
            try PublicKey(bytes: Array(pem.utf8), name: "publicKeyPem", allowWeakKey: true)
        ]
    }

    static let verifyFiles = [
        "rsa_signature_2048_sha256_test.json", "rsa_signature_2048_sha384_test.json", "rsa_signature_2048_sha512_test.json",
        "rsa_signature_3072_sha256_test.json", "rsa_signature_3072_sha384_test.json", "rsa_signature_3072_sha512_test.json",
        "rsa_signature_4096_sha256_test.json", "rsa_signature_4096_sha384_test.json", "rsa_signature_4096_sha512_test.json",
        "rsa_signature_8192_sha256_test.json", "rsa_signature_8192_sha384_test.json", "rsa_signature_8192_sha512_test.json",
        "rsa_pss_2048_sha256_mgf1_32_test.json", "rsa_pss_3072_sha256_mgf1_32_test.json", "rsa_pss_4096_sha256_mgf1_32_test.json",
        "rsa_pkcs1_1024_sig_gen_test.json", "rsa_pkcs1_1536_sig_gen_test.json", "rsa_pkcs1_2048_sig_gen_test.json",
        "rsa_pkcs1_3072_sig_gen_test.json", "rsa_pkcs1_4096_sig_gen_test.json"
    ]

    @Test("verification agrees with every valid and invalid vector", arguments: verifyFiles)
    func verify(_ name: String) throws {
        let file = try Self.load(name)
        var checked = 0
        for group in file.testGroups {
            guard let algorithm = Self.algorithm(file, group) else { continue }
            for key in try Self.publicKeys(group) {
                let verifier = Verifier(policy: TrustPolicy(keys: [key]))
                for test in group.tests {
                    let result = try verifier.verify(signature: bytes(hex: test.sig), bytes: bytes(hex: test.msg), algorithm: algorithm)
                    let context: Comment = "\(name) tcId \(test.tcId) (\(key.source)): \(test.comment) \(test.flags)"
                    switch test.result {
                    case "valid": #expect(result.isValid, context)
                    case "invalid": #expect(!result.isValid, context)
                    default:
                        // "acceptable": either outcome is allowed; a short (leading-zero-stripped)
                        // signature must be refused because its length is not the modulus length.
                        if bytes(hex: test.sig).count != key.signatureLength { #expect(!result.isValid, context) }
                    }
                    #expect(OpenSSLErrorQueue.isEmpty, context)
                    checked += 1
                }
            }
        }
        #expect(checked > 0, "\(name): no group used an algorithm Signet implements")
    }

    @Test("PSS with a salt length other than the digest length never verifies as rsa-pss-sha256")
    func pssSaltMustBeDigestLength() throws {
        let file = try Self.load("rsa_pss_2048_sha256_mgf1_0_test.json")
        var validElsewhere = 0, salt32 = 0
        for group in file.testGroups {
            #expect(group.sLen == 0)
            for key in try Self.publicKeys(group) {
                let verifier = Verifier(policy: TrustPolicy(keys: [key]))
                for test in group.tests {
                    let result = try verifier.verify(signature: bytes(hex: test.sig), bytes: bytes(hex: test.msg), algorithm: .rsaPSSSHA256)
                    if test.comment == "s_len changed to 32" {
                        // The file's one signature re-made with a 32-byte salt: exactly rsa-pss-sha256.
                        #expect(result.isValid, "tcId \(test.tcId): the salt-32 variant must verify")
                        salt32 += 1
                    } else {
                        #expect(
                            !result.isValid,
                            "tcId \(test.tcId): a salt-\(test.comment.contains("s_len") ? test.comment : "0") signature verified as rsa-pss-sha256")
                    }
                    if test.result == "valid" { validElsewhere += 1 }
                }
            }
        }
        #expect(validElsewhere > 0)
        #expect(salt32 == 2)
    }

    @Test(
        "signing reproduces every PKCS#1 v1.5 vector byte for byte",
        arguments: [
            "rsa_pkcs1_1024_sig_gen_test.json", "rsa_pkcs1_1536_sig_gen_test.json", "rsa_pkcs1_2048_sig_gen_test.json",
            "rsa_pkcs1_3072_sig_gen_test.json", "rsa_pkcs1_4096_sig_gen_test.json"
        ])
    func sign(_ name: String) throws {
        let file = try Self.load(name)
        var signed = 0
        for group in file.testGroups {
            guard let algorithm = Self.algorithm(file, group) else { continue }
            let keys = [
                try PrivateKey(bytes: bytes(hex: group.privateKeyPkcs8!), name: "privateKeyPkcs8", allowWeakKey: true),
                try PrivateKey(bytes: Array(group.privateKeyPem!.utf8), name: "privateKeyPem", allowWeakKey: true)
            ]
            for key in keys {
                #expect(key.bits == group.keySize)
                let signer = Signer(key: key, algorithm: algorithm)
                for test in group.tests {
                    let expected = bytes(hex: test.sig)
                    // Vectors flagged "short signature" drop leading zero bytes; Signet (like openssl)
                    // always writes the full modulus length.
                    let padded = [UInt8](repeating: 0, count: key.publicKey.signatureLength - expected.count) + expected
                    let signature = try signer.sign(bytes(hex: test.msg))
                    #expect(signature.bytes == padded, "\(name) tcId \(test.tcId) (\(key.format))")
                    signed += 1
                }
            }
        }
        #expect(signed > 0)
    }
}
