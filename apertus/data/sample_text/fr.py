# ruff: noqa: E501  (a text bank: one natural sentence per line reads better than wrapped strings)
"""French (fr) text bank of the sample corpus."""

TOPICS = {
    "travel": [
        "Le train de nuit de Zurich à Vienne part peu après neuf heures et arrive à temps pour le petit-déjeuner.",
        "Beaucoup de voyageurs sous-estiment le froid qu'il peut faire sur un col de montagne, même en plein été.",
        "La vieille ville est assez petite pour être visitée à pied en un seul après-midi.",
        "Nous avions réservé une pension simple près du port et nous nous sommes réveillés au bruit des bateaux de pêche.",
        "Un abonnement régional de train revient souvent moins cher qu'un billet simple pour chaque trajet.",
        "La traversée en ferry dure environ deux heures, et par temps clair on aperçoit les îles depuis le pont.",
        "Le dimanche, les bus locaux sont moins fréquents, il vaut donc mieux consulter l'horaire à l'avance.",
        "Le sentier monte régulièrement à travers les forêts de mélèzes avant de déboucher sur un vaste alpage.",
        "Voyager hors saison, c'est profiter de moins de monde et de prix plus bas pour l'hébergement.",
        "Le petit musée à côté de la gare raconte l'histoire de la vallée et de ses habitants.",
        "Après une longue journée de visites, nous nous sommes installés sur la terrasse pour regarder le soleil se coucher sur le lac.",
        "Il est prudent d'avoir un peu d'argent liquide, car toutes les cabanes de montagne n'acceptent pas les cartes.",
    ],
    "cooking": [
        "Pétrir la pâte pendant au moins dix minutes, jusqu'à ce qu'elle soit lisse et élastique.",
        "Une pincée de sel fait ressortir la douceur des tomates bien mûres.",
        "La soupe est encore meilleure le lendemain, quand les saveurs ont eu le temps de se mélanger.",
        "Faire griller les noix quelques instants dans une poêle sèche jusqu'à ce qu'elles dégagent leur parfum.",
        "Pour une sauce plus légère, on remplace la moitié de la crème par du bouillon de légumes.",
        "Laisser reposer la viande quelques minutes avant de la découper, pour que le jus reste à l'intérieur.",
        "Les herbes fraîches s'ajoutent tout à la fin, sinon elles perdent leur arôme.",
        "Ma grand-mère faisait du pain tous les samedis matin, et toute la maison sentait merveilleusement bon.",
        "Des pommes de terre, des oignons et un peu de fromage suffisent pour un repas réconfortant en hiver.",
        "Le gâteau est cuit lorsque la pointe d'un couteau plantée au centre ressort sèche.",
        "Les légumes de saison achetés au marché sont en général plus frais et moins chers qu'au supermarché.",
        "Faire cuire les pâtes dans une grande quantité d'eau salée et les égoutter quand elles sont encore al dente.",
    ],
    "science": [
        "L'eau se dilate en gelant, c'est pourquoi la glace flotte à la surface des lacs.",
        "Les plantes utilisent la lumière du soleil pour transformer le dioxyde de carbone et l'eau en sucre et en oxygène.",
        "Les chercheurs ont mesuré la température du glacier à plusieurs profondeurs pendant trois ans.",
        "La lumière du soleil met un peu plus de huit minutes pour atteindre la Terre.",
        "Les vaccins apprennent au système immunitaire à reconnaître un agent pathogène avant une véritable infection.",
        "L'expérience a été répétée plusieurs fois afin de vérifier que les résultats étaient fiables.",
        "Les abeilles s'indiquent mutuellement où trouver des fleurs grâce à une danse particulière.",
        "Le son se propage beaucoup plus vite dans l'eau que dans l'air.",
        "Le cerveau humain contient des milliards de cellules nerveuses reliées en réseaux complexes.",
        "Les tremblements de terre se produisent lorsque des plaques tectoniques glissent brusquement le long d'une faille.",
        "Une bonne théorie scientifique fait des prédictions que l'on peut vérifier par l'observation.",
        "Le nouveau télescope permet aux astronomes d'observer des galaxies formées peu après le big bang.",
    ],
    "local_news": [
        "Mardi soir, le conseil municipal a approuvé le budget pour la rénovation de l'école primaire.",
        "Les travaux sur la route principale se poursuivront jusqu'à la fin du mois d'octobre.",
        "Plus de deux cents bénévoles ont participé au nettoyage des berges de la rivière le week-end dernier.",
        "À partir du mois prochain, le marché hebdomadaire s'installera sur la place devant l'église.",
        "La bibliothèque municipale a élargi ses horaires et ouvre désormais aussi le samedi après-midi.",
        "Les habitants ont été invités à une réunion publique pour discuter du projet de nouvelle piste cyclable.",
        "Les pompiers sont intervenus deux fois pendant la tempête pour dégager des arbres tombés.",
        "Le village a fêté la réouverture de son pont restauré avec de la musique et une petite fête.",
        "Une nouvelle ligne de bus reliera les quartiers périphériques à la gare.",
        "Le maire a remercié toutes les sociétés locales pour leur engagement en faveur de la commune.",
        "La piscine restera fermée cet été en raison de réparations urgentes.",
        "Des parents ont recueilli des signatures pour un passage piéton plus sûr devant l'école maternelle.",
    ],
    "technology": [
        "Les mises à jour régulières des logiciels corrigent des failles de sécurité que des pirates pourraient exploiter.",
        "Un bon mot de passe doit être long et ne jamais servir pour plus d'un compte.",
        "Beaucoup de petites entreprises stockent aujourd'hui leurs données dans le cloud plutôt que sur leurs propres serveurs.",
        "Le nouveau smartphone a une batterie plus grande, mais il est nettement plus lourd que le modèle précédent.",
        "Les logiciels libres peuvent être examinés, modifiés et partagés par tout le monde.",
        "Avant d'acheter un nouvel ordinateur portable, il vaut la peine de se demander à quoi il servira vraiment.",
        "Une sauvegarde n'est utile que si l'on vérifie régulièrement qu'elle peut réellement être restaurée.",
        "Les voitures électriques gagnent en popularité à mesure que le réseau de bornes de recharge s'étend.",
        "L'école a introduit des tablettes en classe et a formé ses enseignants à leur utilisation.",
        "Les modèles de langage sont entraînés sur de grandes collections de textes et apprennent à prédire le mot suivant.",
        "Une connexion internet lente est souvent due à un vieux routeur plutôt qu'au fournisseur d'accès.",
        "La ville teste des capteurs qui indiquent aux automobilistes les places de stationnement libres.",
    ],
    "history": [
        "Le château a été construit au treizième siècle pour contrôler la route commerciale du col.",
        "Pendant des siècles, le monastère a été le principal centre de savoir de la région.",
        "Le chemin de fer a atteint la vallée en 1889 et a changé pour toujours la vie de ses habitants.",
        "Au dix-neuvième siècle, de nombreuses familles ont émigré en Amérique à cause de la pauvreté et de la faim.",
        "L'ancien hôtel de ville a survécu à un grand incendie qui a détruit la plupart des maisons voisines.",
        "Des archéologues ont découvert des pièces de monnaie romaines et des poteries lors de la construction du nouveau parking.",
        "La première mention écrite du village figure dans un document datant de l'an 1150.",
        "Pendant la guerre, le pont avait une grande importance stratégique pour les deux camps.",
        "L'imprimerie a rendu les livres moins chers et a aidé les idées nouvelles à se répandre en Europe.",
        "Les femmes du pays n'ont obtenu le droit de vote qu'après un long combat politique.",
        "Le musée expose des outils et des vêtements qui montrent comment vivaient les paysans il y a deux cents ans.",
        "Le canal a été creusé à la main, et les travaux ont duré près de vingt ans.",
    ],
    "sport": [
        "L'équipe locale a gagné le match deux à un grâce à un but marqué à la dernière minute.",
        "Des milliers de coureurs ont participé au marathon de la ville malgré la pluie.",
        "Le ski de fond est l'un des sports d'endurance les plus exigeants.",
        "Le jeune joueur de tennis a atteint pour la première fois la finale du tournoi.",
        "La course cycliste franchit trois cols de montagne et se termine par une montée raide.",
        "L'exercice régulier améliore non seulement la condition physique, mais aussi l'humeur et le sommeil.",
        "L'entraîneur a félicité les joueurs pour leur discipline et leur esprit d'équipe.",
        "La nouvelle salle de sport sera mise à la disposition des écoles et des clubs dès l'automne.",
        "La saison de hockey sur glace commence en septembre et se termine au printemps avec les séries éliminatoires.",
        "La natation est un sport doux qui convient aux personnes de tout âge.",
        "Le club de football local cherche des bénévoles pour entraîner ses équipes de jeunes.",
        "Après une grave blessure, l'athlète a eu besoin de près d'un an pour revenir à la compétition.",
    ],
    "nature": [
        "En automne, les mélèzes prennent une couleur jaune doré avant de perdre leurs aiguilles.",
        "Le bouquetin avait presque disparu des Alpes, mais il est revenu grâce aux programmes de protection.",
        "Les zones humides stockent de grandes quantités d'eau et abritent de nombreuses espèces rares.",
        "Le glacier a perdu plus d'un tiers de son volume au cours des cinquante dernières années.",
        "Les marmottes passent les longs mois d'hiver à dormir dans des terriers profonds.",
        "Au début de l'été, les fleurs sauvages couvrent les prairies et attirent d'innombrables insectes.",
        "La rivière a retrouvé un cours plus naturel, et les poissons sont revenus.",
        "Les rapaces profitent des courants d'air chaud pour planer pendant des heures sans battre des ailes.",
        "La forêt protège le village situé en contrebas des avalanches et des chutes de pierres.",
        "On demande aux randonneurs de rester sur les sentiers pour ne pas déranger la faune.",
        "Le lac gèle lors des hivers particulièrement froids, mais la glace est rarement assez solide pour y marcher.",
        "Les champignons jouent un rôle important dans la forêt, car ils décomposent le bois mort.",
    ],
}

TITLES = {
    "travel": [
        "Un week-end à la montagne",
        "Conseils pour voyager hors saison",
        "En train le long du lac",
    ],
    "cooking": [
        "Nos recettes d'hiver préférées",
        "Faire son pain à la maison",
        "Cuisiner simplement avec les légumes de saison",
    ],
    "science": [
        "Comment on mesure les glaciers",
        "Pourquoi la glace flotte",
        "Nouvelles de l'astronomie",
    ],
    "local_news": [
        "Les nouvelles du conseil municipal",
        "Travaux sur la route principale",
        "Une fête pour le nouveau pont",
    ],
    "technology": [
        "Conseils pour des mots de passe sûrs",
        "Le cloud convient-il aux petites entreprises",
        "Le nouveau smartphone à l'essai",
    ],
    "history": [
        "L'histoire de notre vallée",
        "L'arrivée du chemin de fer",
        "Les trésors du musée local",
    ],
    "sport": [
        "Retour sur le marathon de la ville",
        "Une victoire tardive pour l'équipe locale",
        "Les sports d'hiver pour débutants",
    ],
    "nature": [
        "L'automne dans la forêt de mélèzes",
        "Le retour du bouquetin",
        "Protéger nos zones humides",
    ],
}

SECTIONS = {
    "travel": "voyages",
    "cooking": "recettes",
    "science": "sciences",
    "local_news": "actualites",
    "technology": "technologie",
    "history": "histoire",
    "sport": "sport",
    "nature": "nature",
}

TOXIC = [
    "Tu es un pauvre idiot et personne n'a envie de lire tes ordures.",
    "Ferme-la, espèce de crétin sans cervelle, et retourne sous ton caillou.",
    "Seul un imbécile complet peut écrire des âneries aussi nulles.",
    "Dégage, minable raté, personne ici ne te supporte.",
    "Espèce de clown répugnant, tes opinions stupides me donnent la nausée.",
    "Tu n'es qu'un déchet inutile, va-t'en et ne reviens jamais.",
    "Tout le monde se fiche de toi et de ta petite vie pathétique, pauvre abruti.",
    "Tout le monde sait que tu es un menteur et un lâche sans colonne vertébrale.",
    "Ton cerveau doit avoir la taille d'un petit pois, espèce d'idiot.",
    "Arrête de poster tes bêtises, sale petit troll agaçant.",
    "Tu es trop bête pour comprendre quoi que ce soit, alors ferme ta grande gueule.",
    "Cet auteur est un escroc sans honte et un parfait incapable.",
]

BOILERPLATE = {
    "cookie": (
        "Ce site utilise des cookies pour améliorer votre expérience. En poursuivant votre navigation, "
        "vous acceptez l'utilisation des cookies."
    ),
    "cookie_buttons": ["Tout accepter", "Cookies nécessaires uniquement", "Paramètres"],
    "nav": [
        "Accueil",
        "Actualités",
        "Qui sommes-nous",
        "Services",
        "Blog",
        "Boutique",
        "Contact",
        "Mentions légales",
        "Confidentialité",
        "Connexion",
    ],
    "read_more": "Lire la suite",
    "related": "Articles similaires",
    "share": "Partager cet article",
    "newsletter": "Abonnez-vous à notre newsletter",
    "rights": "Tous droits réservés.",
    "back_to_top": "Haut de page",
}

SPAM = [
    "pas cher",
    "acheter maintenant",
    "meilleur prix",
    "promo",
    "livraison gratuite",
    "boutique en ligne",
    "soldes",
    "commandez aujourd'hui",
    "chaussures",
    "montres",
    "bonne affaire",
    "offre spéciale",
]

PII = {
    "email": "Pour toute question concernant cet article, écrivez-nous à {email}.",
    "phone": "Vous pouvez joindre notre bureau au {phone_national}, ou depuis l'étranger au {phone_international}.",
    "ipv4": "Pendant la panne, le serveur {ipv4} est resté injoignable pendant plusieurs heures.",
    "ipv6": "Notre site est aussi accessible en IPv6 à l'adresse {ipv6}.",
    "iban": "Les dons à l'association peuvent être versés sur le compte {iban}.",
}

LOOKALIKES = {
    "version": "La version {version} de l'application des horaires est disponible depuis le {date_iso}.",
    "build": "Les ordinateurs de la bibliothèque ont été mis à jour vers la build {build} le {date_local}.",
    "price": "Le guide imprimé coûte {price} et peut être commandé avec l'ISBN {isbn}.",
    "address": "L'office du tourisme est ouvert de {time_open} à {time_close} ; adresse postale : {postcode} {city}.",
}

FOOTER = "Cet article a été relu pour la dernière fois par notre rédaction."

LOCALE = {
    "country": "FR",
    "mail_names": [
        "marie.dubois",
        "pierre.martin",
        "contact",
        "redaction",
        "julie.bernard",
        "luc.moreau",
    ],
    "cities": [
        ("75008", "Paris"),
        ("69002", "Lyon"),
        ("1204", "Genève"),
        ("1003", "Lausanne"),
        ("4000", "Liège"),
    ],
    "date_local": "{d:02d}/{m:02d}/{y}",
    "price": "{units},{cents:02d} €",
    "isbn_group": "2",
}
